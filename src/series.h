/* series.h - 6.3, 6.4 series files and the forecaster, unless GPT2RT_NO_SERIES: inputs/series.h, inputs/forecaster.h
   may call: inputs/patches.h and what it includes */
#ifndef GPT2RT__SRC_SERIES_H
#define GPT2RT__SRC_SERIES_H
#include "inputs/patches.h"

#ifndef GPT2RT_NO_SERIES
#include "inputs/series.h"
#include "inputs/forecaster.h"
#endif /* GPT2RT_NO_SERIES */

#endif /* GPT2RT__SRC_SERIES_H */
