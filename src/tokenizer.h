/* tokenizer.h - 5. Tokenizer, unless GPT2RT_NO_TOKENIZER: the files of tokenizer/
   may call: tokenizer/common.h and what it includes */
#ifndef GPT2RT__SRC_TOKENIZER_H
#define GPT2RT__SRC_TOKENIZER_H
#include "tokenizer/common.h"

#ifndef GPT2RT_NO_TOKENIZER
#include "tokenizer/types.h"
#include "tokenizer/bpe.h"
#include "tokenizer/encode.h"
#include "tokenizer/shards.h"
#endif /* GPT2RT_NO_TOKENIZER */

#endif /* GPT2RT__SRC_TOKENIZER_H */
