// flashgate: causal attention with forgetting gates, sinks, windows, GQA, packed sequences, and paged
// fp8 serving. Include this one header.
#pragma once

#include "flashgate/error.h"
#include "flashgate/ops.h"
#include "flashgate/tensor.h"
