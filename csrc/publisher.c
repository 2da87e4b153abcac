/* publisher.c: (stub) the weight publisher; see DESIGN.md "Weight publishing". */
#include "ops_common.h"

const tl_family tl_family_publish = {NULL, NULL, NULL, NULL, NULL};
