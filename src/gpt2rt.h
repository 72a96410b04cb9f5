/* src/gpt2rt.h - the outline of gpt2rt.h: `make header` (tools/amalgamate.sh) writes the header from it,
   putting each included file in place of its #include, once; the files hold the code, in this order */

#include "manual.h"
#include "api.h"
/* ==========================================================================
   IMPLEMENTATION
   ========================================================================== */
#ifdef GPT2RT_IMPLEMENTATION
#ifndef GPT2RT_IMPLEMENTATION_DONE
#define GPT2RT_IMPLEMENTATION_DONE

#include "common/platform.h"
#include "common/threads.h"
#include "common/types.h"
#include "common/errors.h"
#include "common/comm.h"
#include "common/stages.h"
#include "config/config.h"
#include "config/caps.h"
#include "config/checks.h"
#include "plan/params.h"
#include "plan/activations.h"
#include "plan/split.h"
#include "plan/plan.h"
#include "plan/advisor.h"
#include "formats/safetensors_read.h"
#include "formats/safetensors_write.h"
#include "formats/hf.h"
#include "tokenizer/common.h"
#include "tokenizer.h"
#include "inputs/patches.h"
#include "series.h"
#include "optimizer.h"
#include "processes/mpi.h"
#include "processes/rendezvous.h"
#include "backend/interface.h"
#include "backend/driver.h"
#include "cpu/ops.h"
#include "cpu/matmul.h"
#include "cpu/step_time.h"
#include "cpu/model.h"
#include "cpu/backend.h"
#include "cuda.h"
#include "context/context.h"
#include "context/data_parallel.h"
#include "context/layer_split.h"
#include "context/mpi.h"
#include "public/plan.h"
#include "public/context.h"
#include "public/training.h"
#include "public/files.h"
#include "public/generate.h"
#include "forecaster.h"
#include "forecaster_train.h"
#include "forecaster_eval.h"
#endif /* GPT2RT_IMPLEMENTATION_DONE */
#endif /* GPT2RT_IMPLEMENTATION */

/*
MIT License

Copyright (c) 2026 the gpt2rt authors

Permission is hereby granted, free of charge, to any person obtaining a copy of
this software and associated documentation files (the "Software"), to deal in
the Software without restriction, including without limitation the rights to
use, copy, modify, merge, publish, distribute, sublicense, and/or sell copies
of the Software, and to permit persons to whom the Software is furnished to do
so, subject to the following conditions:

The above copyright notice and this permission notice shall be included in all
copies or substantial portions of the Software.

THE SOFTWARE IS PROVIDED "AS IS", WITHOUT WARRANTY OF ANY KIND, EXPRESS OR
IMPLIED, INCLUDING BUT NOT LIMITED TO THE WARRANTIES OF MERCHANTABILITY,
FITNESS FOR A PARTICULAR PURPOSE AND NONINFRINGEMENT. IN NO EVENT SHALL THE
AUTHORS OR COPYRIGHT HOLDERS BE LIABLE FOR ANY CLAIM, DAMAGES OR OTHER
LIABILITY, WHETHER IN AN ACTION OF CONTRACT, TORT OR OTHERWISE, ARISING FROM,
OUT OF OR IN CONNECTION WITH THE SOFTWARE OR THE USE OR OTHER DEALINGS IN THE
SOFTWARE.
*/
