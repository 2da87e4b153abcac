/* ops_matmul.c: (stub) the matmul op family; see DESIGN.md. */
#include "ops_common.h"

const tl_family tl_family_matmul = {NULL, NULL, NULL, NULL, NULL};
