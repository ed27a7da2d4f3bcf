/* All public headers together, twice (include guards), as strict C99. */
#include "shardrec/shardrec.h"

int headertest_umbrella(void);
int headertest_umbrella(void) { return SHARDREC_OK + (int)sizeof(shardrec_status_t) - 4; }
