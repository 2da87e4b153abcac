/* ops_random.c: (stub) the random op family; see DESIGN.md. */
#include "ops_common.h"

const tl_family tl_family_random = {NULL, NULL, NULL, NULL, NULL};
