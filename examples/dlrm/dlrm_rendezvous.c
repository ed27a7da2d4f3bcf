/*
 * @file dlrm_rendezvous.c
 * @brief One rank per process meeting through a unique id (dlrm_rendezvous.h).
 */
#define _POSIX_C_SOURCE 200112L
#include "dlrm_rendezvous.h"

#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static void id_to_hex(const shardrec_unique_id_t* id, char* hex) {
  static const char digits[] = "0123456789abcdef";
  int i;
  for (i = 0; i < SHARDREC_UNIQUE_ID_BYTES; ++i) {
    hex[2 * i] = digits[(unsigned char)id->internal[i] >> 4];
    hex[2 * i + 1] = digits[(unsigned char)id->internal[i] & 15];
  }
  hex[2 * SHARDREC_UNIQUE_ID_BYTES] = '\0';
}

static int hex_value(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

static int id_from_hex(const char* hex, shardrec_unique_id_t* id) {
  int i;
  size_t n = strlen(hex);
  while (n > 0 && (hex[n - 1] == '\n' || hex[n - 1] == '\r' || hex[n - 1] == ' ')) --n;
  if (n != 2 * SHARDREC_UNIQUE_ID_BYTES) return -1;
  for (i = 0; i < SHARDREC_UNIQUE_ID_BYTES; ++i) {
    const int hi = hex_value(hex[2 * i]), lo = hex_value(hex[2 * i + 1]);
    if (hi < 0 || lo < 0) return -1;
    id->internal[i] = (char)(hi * 16 + lo);
  }
  return 0;
}

/* Rank 0 publishes the id by renaming a complete file into place, so a reader never sees half;
   readable by its owner only, since whoever reads it can join the run. */
static int write_id_file(const char* path, const char* hex) {
  char tmp[4096];
  FILE* f;
  int fd;
  snprintf(tmp, sizeof(tmp), "%s.tmp", path);
  fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC, 0600);
  if (fd < 0) return -1;
  f = fdopen(fd, "w");
  if (f == NULL) {
    close(fd);
    return -1;
  }
  if (fprintf(f, "%s\n", hex) < 0) {
    fclose(f);
    return -1;
  }
  if (fclose(f) != 0) return -1;
  return rename(tmp, path);
}

/* Waits up to a minute for rank 0's id file. */
static int read_id_file(const char* path, shardrec_unique_id_t* id) {
  char hex[2 * SHARDREC_UNIQUE_ID_BYTES + 8];
  int tries;
  for (tries = 0; tries < 600; ++tries) {
    FILE* f = fopen(path, "r");
    if (f != NULL) {
      const int ok = fgets(hex, sizeof(hex), f) != NULL && id_from_hex(hex, id) == 0;
      fclose(f);
      return ok ? 0 : -1;
    }
    {
      const struct timespec tenth = {0, 100000000L};
      nanosleep(&tenth, NULL);
    }
  }
  return -1;
}

int dlrm_rendezvous(shardrec_comm_t** comm, int rank, int world, const char* id_hex,
                    const char* id_file) {
  shardrec_comm_options_t options = SHARDREC_COMM_OPTIONS_INIT;
  shardrec_unique_id_t id;
  *comm = NULL;
  if (rank == 0) {
    char hex[2 * SHARDREC_UNIQUE_ID_BYTES + 1];
    if (shardrec_comm_unique_id_create(&id) != SHARDREC_OK) {
      fprintf(stderr, "unique id: %s\n", shardrec_last_error());
      return -1;
    }
    id_to_hex(&id, hex);
    /* The id is a bearer secret (comm.h): printed only when there is no file to carry it. */
    if (id_file == NULL) {
      printf("unique id (pass to the other ranks as --unique-id or DLRM_UNIQUE_ID): %s\n", hex);
    } else if (write_id_file(id_file, hex) != 0) {
      fprintf(stderr, "cannot write %s\n", id_file);
      return -1;
    } else {
      printf("unique id written to %s\n", id_file);
    }
    fflush(stdout);
  } else if (id_hex != NULL) {
    if (id_from_hex(id_hex, &id) != 0) {
      fprintf(stderr, "the unique id must be %d hex digits\n", 2 * SHARDREC_UNIQUE_ID_BYTES);
      return -1;
    }
  } else if (id_file == NULL || read_id_file(id_file, &id) != 0) {
    fprintf(stderr,
            "rank %d needs rank 0's id: --unique-id, DLRM_UNIQUE_ID or a readable "
            "--unique-id-file\n",
            rank);
    return -1;
  }
  if (shardrec_comm_create(comm, &id, world, rank, &options) != SHARDREC_OK) {
    fprintf(stderr, "rank %d: communicator: %s\n", rank, shardrec_last_error());
    return -1;
  }
  return 0;
}
