/* ops_reduce.c: (stub) the reduce op family; see DESIGN.md. */
#include "ops_common.h"

const tl_family tl_family_reduce = {NULL, NULL, NULL, NULL, NULL};
