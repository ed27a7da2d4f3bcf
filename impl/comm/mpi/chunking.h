// Splitting one logical message into pieces an MPI with int counts can carry: Open MPI 4.1 has
// no MPI-4 large-count (_c) calls, so a block beyond INT_MAX elements or bytes goes as several.
#pragma once

#include <algorithm>
#include <climits>
#include <cstddef>

namespace shardrec::comm::mpi {

// Default bound on one MPI message: 1 GiB, well inside int counts of bytes. The environment
// variable SHARDREC_MPI_MAX_MESSAGE_BYTES lowers it (tests use a few bytes to exercise the
// pieces without 2^31-element buffers).
inline constexpr size_t kDefaultMaxMessageBytes = size_t{1} << 30;

// Units (elements or bytes) per piece under a byte limit: at least 1, at most INT_MAX.
constexpr size_t UnitsPerPiece(size_t max_bytes, size_t unit_bytes) {
  const size_t units = unit_bytes == 0 ? 1 : max_bytes / unit_bytes;
  return std::clamp<size_t>(units, 1, static_cast<size_t>(INT_MAX));
}

// Number of pieces of at most `limit` (>= 1) units that cover `count` units.
constexpr size_t NumPieces(size_t count, size_t limit) {
  return count == 0 ? 0 : (count - 1) / limit + 1;
}

// Number of MPI messages that carry a block of `count` units: NumPieces, but at least one, so
// that an empty block is a message too and a peer that expected some data notices (as one that
// expected none notices data).
constexpr size_t NumMessages(size_t count, size_t limit) {
  return count == 0 ? 1 : NumPieces(count, limit);
}

struct Piece {
  size_t offset;  // in units from the start of the message
  size_t count;   // <= limit, so it fits an int
};

// Piece i of NumPieces(count, limit), in order; the pieces tile [0, count) without overlap.
// Piece 0 of an empty block is {0, 0}.
constexpr Piece PieceAt(size_t count, size_t limit, size_t i) {
  const size_t offset = i * limit;
  return {offset, std::min(limit, count - offset)};
}

// SHARDREC_MPI_MAX_MESSAGE_BYTES when set to a positive integer, else kDefaultMaxMessageBytes.
size_t MaxMessageBytesFromEnv();

}  // namespace shardrec::comm::mpi
