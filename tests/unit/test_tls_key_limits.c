/* test_tls_key_limits.c — how many records the record layer seals or opens
 * under one key: AES-GCM keys are spent before RFC 8446 §5.5's limit of about
 * 2^24.5 records, and no sequence number ever wraps. */
#include <stdint.h>

#include "check.h"
#include "xnet/tls/tls_aead.h"

static void aes_gcm_keys_are_spent_before_the_rfc_limit(void) {
    const uint64_t rfc_limit = 23726566; /* 2^24.5 */
    for (xTlsAead aead = XTLS_AEAD_AES_128_GCM; aead <= XTLS_AEAD_AES_256_GCM; aead++) {
        uint64_t first_spent = 0;
        for (uint64_t seq = 1u << 20; seq <= rfc_limit; seq += 1u << 10) {
            if (xTlsKeyUseAt(aead, seq) != XTLS_KEYS_USABLE) {
                first_spent = seq;
                break;
            }
        }
        CHECK_MSG(first_spent != 0 && first_spent < rfc_limit - 64, "aead %d: spent at %llu", (int)aead,
                  (unsigned long long)first_spent);
        CHECK_EQ_INT(xTlsKeyUseAt(aead, 0), XTLS_KEYS_USABLE);
        CHECK_EQ_INT(xTlsKeyUseAt(aead, ((uint64_t)1 << 24) - 1), XTLS_KEYS_USABLE);
        CHECK_EQ_INT(xTlsKeyUseAt(aead, (uint64_t)1 << 24), XTLS_KEYS_SPENT);
        CHECK_EQ_INT(xTlsKeyUseAt(aead, rfc_limit), XTLS_KEYS_SPENT);
        CHECK_EQ_INT(xTlsKeyUseAt(aead, UINT64_MAX - 1), XTLS_KEYS_SPENT);
    }
}

static void chacha20_keys_last_until_the_sequence_number_would_wrap(void) {
    CHECK_EQ_INT(xTlsKeyUseAt(XTLS_AEAD_CHACHA20_POLY1305, (uint64_t)1 << 40), XTLS_KEYS_USABLE);
    CHECK_EQ_INT(xTlsKeyUseAt(XTLS_AEAD_CHACHA20_POLY1305, UINT64_MAX - 2), XTLS_KEYS_USABLE);
    /* One number is kept for the KeyUpdate that moves to new keys. */
    CHECK_EQ_INT(xTlsKeyUseAt(XTLS_AEAD_CHACHA20_POLY1305, UINT64_MAX - 1), XTLS_KEYS_SPENT);
}

static void the_last_sequence_number_is_never_used(void) {
    for (xTlsAead aead = XTLS_AEAD_AES_128_GCM; aead <= XTLS_AEAD_CHACHA20_POLY1305; aead++)
        CHECK_EQ_INT(xTlsKeyUseAt(aead, UINT64_MAX), XTLS_KEYS_LAST);
}

int main(void) {
    RUN(aes_gcm_keys_are_spent_before_the_rfc_limit);
    RUN(chacha20_keys_last_until_the_sequence_number_would_wrap);
    RUN(the_last_sequence_number_is_never_used);
    return CHECK_SUMMARY();
}
