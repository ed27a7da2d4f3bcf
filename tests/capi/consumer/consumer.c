/* Minimal downstream program: links libshardrec and checks header and library versions agree. */
#include <stdio.h>

#include "shardrec/shardrec.h"

int main(void) {
  if (shardrec_version() != SHARDREC_VERSION_CODE) {
    fprintf(stderr, "version mismatch: library %d, headers %d\n", shardrec_version(),
            SHARDREC_VERSION_CODE);
    return 1;
  }
  printf("consumer linked libshardrec %s\n", shardrec_version_string());
  return 0;
}
