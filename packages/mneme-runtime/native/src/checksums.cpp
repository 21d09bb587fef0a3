// The recording format's checksums and digests: CRC-32C as Zarr's crc32c codec computes it
// (SSE4.2 where available) and combined over chunks, and the content digest that names a
// chunk in the content store (recording_writer.hpp declares them).
#include <array>
#include <cstdio>
#include <cstring>
#include <string>

#include "mneme/runtime/recording_writer.hpp"

namespace mneme::runtime {
namespace {

uint32_t crc32c_table(const uint8_t* data, size_t size, uint32_t crc) {
  static const std::array<uint32_t, 256> table = [] {
    std::array<uint32_t, 256> t{};
    for (uint32_t i = 0; i < 256; ++i) {
      uint32_t c = i;
      for (int k = 0; k < 8; ++k) c = (c & 1) ? (c >> 1) ^ 0x82F63B78u : c >> 1;
      t[i] = c;
    }
    return t;
  }();
  for (size_t i = 0; i < size; ++i) crc = table[(crc ^ data[i]) & 0xFF] ^ (crc >> 8);
  return crc;
}

#if defined(__x86_64__)
// The SSE4.2 crc32 instruction computes exactly CRC-32C, 8 bytes at a time.
__attribute__((target("sse4.2"))) uint32_t crc32c_sse42(const uint8_t* data, size_t size, uint32_t crc) {
  uint64_t c = crc;
  for (; size >= 8; data += 8, size -= 8) {
    uint64_t word;
    std::memcpy(&word, data, 8);
    c = __builtin_ia32_crc32di(c, word);
  }
  uint32_t c32 = static_cast<uint32_t>(c);
  for (; size; ++data, --size) c32 = __builtin_ia32_crc32qi(c32, *data);
  return c32;
}
#endif

}  // namespace

// CRC-32C (Castagnoli), reflected, as Zarr's crc32c codec computes it.
uint32_t crc32c(const uint8_t* data, size_t size) {
#if defined(__x86_64__)
  static const bool sse42 = __builtin_cpu_supports("sse4.2");
  if (sse42) return crc32c_sse42(data, size, 0xFFFFFFFFu) ^ 0xFFFFFFFFu;
#endif
  return crc32c_table(data, size, 0xFFFFFFFFu) ^ 0xFFFFFFFFu;
}

namespace {

constexpr uint32_t kCrc32cPoly = 0x82F63B78u;  // reflected Castagnoli polynomial

// a * b modulo the CRC polynomial (bit-reflected: bit 31 is x^0).
uint32_t gf2_multiply(uint32_t a, uint32_t b) {
  uint32_t product = 0;
  for (uint32_t bit = 1u << 31; bit; bit >>= 1) {
    if (a & bit) product ^= b;
    b = (b & 1) ? (b >> 1) ^ kCrc32cPoly : b >> 1;
  }
  return product;
}

// x^(8 * bytes) modulo the polynomial, by repeated squaring.
uint32_t x_to_bytes(uint64_t bytes) {
  uint32_t result = 1u << 31;  // 1
  uint32_t power = 1u << 23;   // x^8: one byte
  for (; bytes; bytes >>= 1) {
    if (bytes & 1) result = gf2_multiply(result, power);
    power = gf2_multiply(power, power);
  }
  return result;
}

}  // namespace

uint32_t crc32c_combine(uint32_t crc_a, uint32_t crc_b, uint64_t length_b) {
  // CRC(A||B) = CRC(A) * x^(8|B|) + CRC(B): the pre- and post-conditioning cancel out.
  return gf2_multiply(crc_a, x_to_bytes(length_b)) ^ crc_b;
}

namespace {

uint64_t read64(const uint8_t* p) {
  uint64_t v;
  std::memcpy(&v, p, 8);
  return v;  // little-endian hosts only (x86-64, aarch64), as the format
}

uint64_t rotl(uint64_t v, int r) { return (v << r) | (v >> (64 - r)); }

uint64_t avalanche(uint64_t h) {
  h ^= h >> 33;
  h *= 0xff51afd7ed558ccdull;
  h ^= h >> 33;
  h *= 0xc4ceb9fe1a85ec53ull;
  return h ^ (h >> 33);
}


}  // namespace

// Four 64-bit lanes of multiply-rotate over 32-byte stripes, the tail and the length,
// folded into two 64-bit halves with different finalisers.
bool all_zero(const uint8_t* data, size_t size) {
  size_t i = 0;
  for (; i + 64 <= size; i += 64) {
    uint64_t w[8];
    std::memcpy(w, data + i, 64);
    if (w[0] | w[1] | w[2] | w[3] | w[4] | w[5] | w[6] | w[7]) return false;
  }
  for (; i < size; ++i)
    if (data[i]) return false;
  return true;
}

std::string chunk_digest(const uint8_t* data, size_t size) {
  constexpr uint64_t P1 = 0x9E3779B185EBCA87ull, P2 = 0xC2B2AE3D27D4EB4Full, P3 = 0x165667B19E3779F9ull;
  uint64_t lane[4] = {P1 + P2, P2, 0, 0 - P1};
  size_t at = 0;
  for (; at + 32 <= size; at += 32)
    for (int i = 0; i < 4; ++i) lane[i] = rotl(lane[i] + read64(data + at + 8 * i) * P2, 31) * P1;
  uint64_t tail[4] = {0, 0, 0, 0};
  std::memcpy(tail, data + at, size - at);
  for (int i = 0; i < 4; ++i) lane[i] = rotl(lane[i] + tail[i] * P2, 31) * P1;
  uint64_t lo = avalanche(lane[0] ^ rotl(lane[1], 17) ^ rotl(lane[2], 29) ^ rotl(lane[3], 43) ^ (size * P3));
  uint64_t hi = avalanche(lane[3] + rotl(lane[2], 7) * P3 + rotl(lane[1], 13) * P1 + lane[0] + ~uint64_t(size));
  char hex[33];
  std::snprintf(hex, sizeof hex, "%016llx%016llx", static_cast<unsigned long long>(hi),
                static_cast<unsigned long long>(lo));
  return hex;
}

}  // namespace mneme::runtime
