/* ops_shape.c: (stub) the shape op family; see DESIGN.md. */
#include "ops_common.h"

const tl_family tl_family_shape = {NULL, NULL, NULL, NULL, NULL};
