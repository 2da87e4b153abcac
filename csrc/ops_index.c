/* ops_index.c: (stub) the index op family; see DESIGN.md. */
#include "ops_common.h"

const tl_family tl_family_index = {NULL, NULL, NULL, NULL, NULL};
