// A POSIX shared-memory segment mapped by the ranks of one host. One rank creates it under a name
// no other session can guess; the others open it by that name; the creator unlinks it as soon as
// every rank has mapped it, so that from then on a crash of any process leaves nothing behind in
// /dev/shm (the memory goes when the last mapping does).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "impl/core/status.h"

namespace shardrec::comm::shm {

class Segment {
 public:
  // Creates a new zero-filled segment of `bytes` (bytes > 0) readable by this user only and maps
  // it. *name receives the name to hand to the other ranks. Errors: kIo naming the system call.
  static Status Create(size_t bytes, std::string* name, std::unique_ptr<Segment>* out);
  // Maps the segment `name`, which must hold exactly `bytes`. Errors: kIo (missing, a different
  // size, not mappable).
  static Status Open(const std::string& name, size_t bytes, std::unique_ptr<Segment>* out);

  // Unmaps; unlinks first when this process created the segment and has not unlinked it yet.
  ~Segment();
  Segment(const Segment&) = delete;
  Segment& operator=(const Segment&) = delete;

  // Removes the name (creator only; idempotent). Mappings stay valid.
  void Unlink();

  uint8_t* data() const { return data_; }
  size_t size() const { return size_; }

 private:
  Segment(uint8_t* data, size_t size, std::string name, bool linked)
      : data_(data), size_(size), name_(std::move(name)), linked_(linked) {}

  uint8_t* data_;
  size_t size_;
  std::string name_;
  bool linked_;  // this process created the name and has not removed it
};

}  // namespace shardrec::comm::shm
