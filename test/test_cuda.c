#include "harness.h"
Suite *t_suite(void) { return suite_create("local"); }
