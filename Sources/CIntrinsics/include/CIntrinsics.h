#ifndef TOPICSTORE_CINTRINSICS_H
#define TOPICSTORE_CINTRINSICS_H

#include <stddef.h>
#include <stdint.h>

#include "HeldList.h"

/// Asks the CPU to bring the cache line at `address` in for a read soon.
/// Swift has no prefetch of its own; a rebuild issues these a few records
/// ahead for the hash-table slots the fold is about to probe.
static inline void topicstore_prefetch(const void *address) {
    __builtin_prefetch(address, 0, 3);
}

/// Whether this CPU has the SSE4.2 CRC32 instruction (x86-64; 0 elsewhere).
int topicstore_crc32c_hardware_available(void);

/// Continues a CRC-32C over `count` bytes with the SSE4.2 instruction. `crc`
/// is the running register (the inverted seed at the start); the caller
/// inverts the result. Only call it when `topicstore_crc32c_hardware_available()`.
uint32_t topicstore_crc32c_hardware(uint32_t crc, const void *bytes, size_t count);

/// Writes the two hex digits of each of `count` bytes at `out` (2 × count
/// bytes, the high digit first), lowercase or `upper`case: 16 bytes a step
/// with SSE2 on x86-64 (where every CPU has it), a table elsewhere and for the
/// tail. A stream of recipients spells every stored token this way.
void topicstore_spell_hex(const void *bytes, size_t count, void *out, int upper);

/// Classifies `count` bytes as a run of hex digits: 0 when one is not a hex
/// digit or when both letter cases appear, 1 when the letters are lowercase
/// (or there are none), 2 when they are uppercase. 16 bytes a step with SSE2
/// on x86-64. Every device_id and token written is classified this way
/// (`StoredName.plan`); a byte at a time it was 5% of the writer thread.
int topicstore_hex_case(const void *text, size_t count);

/// The same for a 36-byte UUID in its 8-4-4-4-12 form: 0 unless the four
/// dashes are in place and the 32 other bytes are hex digits of one case.
int topicstore_uuid_case(const void *text);

/// Writes the `count / 2` bytes that `count` hex digits spell (`count` even,
/// every byte a hex digit of either case, as `topicstore_hex_case` found) at
/// `out`: 32 digits a step with SSE2 on x86-64, a byte at a time elsewhere.
void topicstore_pack_hex(const void *text, size_t count, void *out);

/// The 16 bytes a UUID in its 8-4-4-4-12 form spells (its dashes in place and
/// its digits hex, as `topicstore_uuid_case` found), at `out`.
void topicstore_pack_uuid(const void *text, void *out);

/// Whether `count` bytes are an FCM-shaped token: base64url characters (A-Z
/// a-z 0-9 - _) with at most one colon among them. -1 when not; else the
/// colon's index, or `count` when there is none.
long topicstore_token64_colon(const void *text, size_t count);

/// Writes the 6-bit values of the `count` characters (at most 255) of such a
/// token (shaped as `topicstore_token64_colon` found), leaving out the one at
/// `colon` (`count` when none), at `out`: four characters in three bytes, the
/// first in the high bits, the last byte's unused low bits zero. 16 characters
/// a step with SSSE3 where the CPU has it.
void topicstore_pack_token64(const void *text, size_t count, size_t colon, void *out);

/// Writes the `symbols` characters packed at `packed` at `out`, with a colon
/// inserted at index `colon` when `colon <= symbols` (then `symbols + 1`
/// bytes in all).
void topicstore_spell_token64(const void *packed, size_t symbols, size_t colon, void *out);

#endif
