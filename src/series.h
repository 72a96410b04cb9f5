/* series.h - 6.3 series files, unless GPT2RT_NO_SERIES: inputs/series.h
   may call: inputs/patches.h and what it includes */
#ifndef GPT2RT__SRC_SERIES_H
#define GPT2RT__SRC_SERIES_H
#include "inputs/patches.h"

#ifndef GPT2RT_NO_SERIES
#include "inputs/series.h"
#endif /* GPT2RT_NO_SERIES */

#endif /* GPT2RT__SRC_SERIES_H */
