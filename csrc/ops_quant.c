/* ops_quant.c: (stub) the quant op family; see DESIGN.md. */
#include "ops_common.h"

const tl_family tl_family_quant = {NULL, NULL, NULL, NULL, NULL};
