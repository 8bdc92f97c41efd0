// CRC32C (Castagnoli, reflected polynomial 0x82F63B78): the checksum the
// checkpoint manifest stores per (dataset, written block) (ARCHITECTURE §5).
#pragma once
#include <cstddef>
#include <cstdint>

namespace ptdp {

// Incremental: start with crc = 0 and feed the previous result back in, so
// crc32c(crc32c(0, a, na), b, nb) == crc32c(0, ab, na + nb).
// crc32c(0, "123456789", 9) == 0xE3069283.
// Uses the SSE4.2 crc32 instruction when the CPU has it, else crc32c_table.
uint32_t crc32c(uint32_t crc, const void *data, size_t n);

// The portable table-driven version (slicing-by-8); same results, for tests.
uint32_t crc32c_table(uint32_t crc, const void *data, size_t n);

// Whether crc32c() runs on the CPU instruction.
bool crc32c_hardware();

}  // namespace ptdp
