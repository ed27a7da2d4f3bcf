/*
 * @file dlrm_progress.h
 * @brief The DLRM example's console output: on a terminal a progress line that is rewritten
 *        in place (carriage return, clear to end of line) with permanent lines printed above
 *        it; elsewhere (a pipe, a file, a CI log) only the permanent lines, one per line.
 */
#ifndef DLRM_PROGRESS_H_
#define DLRM_PROGRESS_H_

#include <stdio.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct dlrm_progress {
  FILE* out;    /* borrowed */
  int terminal; /* rewrite the progress line in place */
  int live;     /* a progress line is on screen, not yet ended by a newline */
} dlrm_progress_t;

/* @p terminal: whether @p out is a terminal (the caller asks isatty; tests choose). */
void dlrm_progress_init(dlrm_progress_t* p, FILE* out, int terminal);

/* On a terminal, replaces the progress line with the formatted text (no newline); elsewhere
   does nothing, so logs keep only the periodic lines. */
void dlrm_progress_update(dlrm_progress_t* p, const char* format, ...)
#ifdef __GNUC__
    __attribute__((format(printf, 2, 3)))
#endif
    ;

/* Prints a permanent line (the newline is added): on a terminal it replaces the progress line,
   which the next update draws again below it. */
void dlrm_progress_line(dlrm_progress_t* p, const char* format, ...)
#ifdef __GNUC__
    __attribute__((format(printf, 2, 3)))
#endif
    ;

/* Ends a progress line left on screen, so that what follows starts on a fresh line. */
void dlrm_progress_finish(dlrm_progress_t* p);

#ifdef __cplusplus
}
#endif

#endif /* DLRM_PROGRESS_H_ */
