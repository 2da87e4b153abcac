/* ops_llm.c: (stub) the llm op family; see DESIGN.md. */
#include "ops_common.h"

const tl_family tl_family_llm = {NULL, NULL, NULL, NULL, NULL};
