/*
 * @file dlrm_progress.c
 * @brief Console output of the DLRM example (dlrm_progress.h).
 */
#include "dlrm_progress.h"

#include <stdarg.h>

/* Carriage return, then ANSI "erase to end of line" (ECMA-48 EL 0). */
static const char kRewrite[] = "\r\033[K";

void dlrm_progress_init(dlrm_progress_t* p, FILE* out, int terminal) {
  p->out = out;
  p->terminal = terminal;
  p->live = 0;
}

void dlrm_progress_update(dlrm_progress_t* p, const char* format, ...) {
  va_list args;
  if (!p->terminal) return;
  fputs(kRewrite, p->out);
  va_start(args, format);
  vfprintf(p->out, format, args);
  va_end(args);
  p->live = 1;
  fflush(p->out);
}

void dlrm_progress_line(dlrm_progress_t* p, const char* format, ...) {
  va_list args;
  if (p->live) fputs(kRewrite, p->out);
  va_start(args, format);
  vfprintf(p->out, format, args);
  va_end(args);
  fputc('\n', p->out);
  p->live = 0;
  fflush(p->out);
}

void dlrm_progress_finish(dlrm_progress_t* p) {
  if (p->live) fputc('\n', p->out);
  p->live = 0;
  fflush(p->out);
}
