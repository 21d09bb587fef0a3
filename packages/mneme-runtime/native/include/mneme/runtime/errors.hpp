// Exception types of the device layer.
//
// Two families: UserError for conditions a user can fix (address range taken,
// range too small for the recording, no driver installed), shown as one line by
// the CLI; everything else (driver failures, misuse of the API) is an Error.
#pragma once

#include <cstdint>
#include <stdexcept>
#include <string>

namespace mneme::runtime {

class Error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

class UserError : public Error {
 public:
  using Error::Error;
};

// The fixed virtual address range could not be reserved at the requested base.
class RangeUnavailableError : public UserError {
 public:
  using UserError::UserError;
};

// The reserved range has no free block large enough for an allocation.
class OutOfSpaceError : public UserError {
 public:
  OutOfSpaceError(const std::string& message, uint64_t requested, uint64_t range_size,
                  uint64_t needed_size)
      : UserError(message), requested(requested), range_size(range_size),
        needed_size(needed_size) {}
  uint64_t requested;    // bytes asked for
  uint64_t range_size;   // bytes the reserved range holds
  uint64_t needed_size;  // a range size that would have fit this allocation
};

// An address lies outside the reserved range (e.g. a recording made with a
// different base or a larger range).
class OutOfRangeError : public UserError {
 public:
  using UserError::UserError;
};

// libcuda.so.1 (or libamdhip64.so) is missing, too old, or cuInit failed.
class NoDriverError : public UserError {
 public:
  using UserError::UserError;
};

// The driver works but the requested device does not exist.
class NoDeviceError : public UserError {
 public:
  using UserError::UserError;
};

// Misuse of the allocator: freeing an address that is not a live allocation,
// recreating an allocation over a live one.
class AllocationError : public Error {
 public:
  using Error::Error;
};

// A driver call failed; carries the driver's own code and name.
class DriverError : public Error {
 public:
  DriverError(const std::string& message, int code, std::string name)
      : Error(message), code(code), name(std::move(name)) {}
  int code;
  std::string name;  // e.g. "CUDA_ERROR_OUT_OF_MEMORY"
};

}  // namespace mneme::runtime
