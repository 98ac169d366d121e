// CPU instructions Swift cannot express. The CRC-32C here is the one the log's
// records carry (Castagnoli, reflected 0x82F63B78), computed with SSE4.2's
// crc32 instruction: Sources/SubscriptionLog/CRC32C.swift keeps the table
// version for other CPUs, and the tests compare the two.
#include "CIntrinsics.h"
#include <string.h>

#if defined(__x86_64__)
#include <nmmintrin.h>

int topicstore_crc32c_hardware_available(void) {
    __builtin_cpu_init();
    return __builtin_cpu_supports("sse4.2") ? 1 : 0;
}

__attribute__((target("sse4.2")))
uint32_t topicstore_crc32c_hardware(uint32_t crc, const void *bytes, size_t count) {
    const unsigned char *p = bytes;
    uint64_t c = crc;
    while (count >= 8) {
        uint64_t word;
        memcpy(&word, p, 8);
        c = _mm_crc32_u64(c, word);
        p += 8;
        count -= 8;
    }
    uint32_t c32 = (uint32_t)c;
    while (count > 0) {
        c32 = _mm_crc32_u8(c32, *p);
        p += 1;
        count -= 1;
    }
    return c32;
}

#else

int topicstore_crc32c_hardware_available(void) { return 0; }

uint32_t topicstore_crc32c_hardware(uint32_t crc, const void *bytes, size_t count) {
    (void)bytes; (void)count;
    return crc;
}

#endif
