/* test_base64.c — base64url decoding (xbase/text/base64.h), as HTTP2-Settings
 * uses it: RFC 4648's test vectors in the URL alphabet with and without
 * padding, every byte value through encode and decode, and every way text
 * can be wrong (a character outside the alphabet, padding in the wrong
 * place or of the wrong length, a length no encoder makes, stray bits, no
 * room), with inputs placed against an unreadable page so an over-read
 * crashes. */
#include <stdint.h>
#include <string.h>

#include "check.h"
#include "guard_page.h"
#include "xbase/text/base64.h"

/* Decodes text (a C string) copied to end at an unreadable page. */
static long url_decode(const char *text, void *out, size_t cap) {
    static char *end;
    if (!end) end = guard_page_map(256);
    size_t len = strlen(text);
    memcpy(end - len, text, len);
    return xBase64UrlDecode(end - len, len, out, cap);
}

static void test_rfc4648_vectors_decode_with_or_without_padding(void) {
    static const char *const vectors[][3] = {
        {"", "", ""},
        {"f", "Zg", "Zg=="},
        {"fo", "Zm8", "Zm8="},
        {"foo", "Zm9v", "Zm9v"},
        {"foob", "Zm9vYg", "Zm9vYg=="},
        {"fooba", "Zm9vYmE", "Zm9vYmE="},
        {"foobar", "Zm9vYmFy", "Zm9vYmFy"},
    };
    for (size_t i = 0; i < sizeof vectors / sizeof *vectors; i++) {
        size_t want = strlen(vectors[i][0]);
        char out[8];
        for (int padded = 0; padded < 2; padded++) {
            memset(out, 0, sizeof out);
            CHECK_EQ_INT(url_decode(vectors[i][1 + padded], out, sizeof out), (long)want);
            CHECK(memcmp(out, vectors[i][0], want) == 0);
        }
    }
}

static void test_url_digits_stand_for_62_and_63(void) {
    uint8_t out[3];
    CHECK_EQ_INT(url_decode("-_-_", out, sizeof out), 3);
    CHECK(out[0] == 0xfb && out[1] == 0xff && out[2] == 0xbf);
    /* A settings payload as curl sends it: MAX_CONCURRENT_STREAMS 100,
     * INITIAL_WINDOW_SIZE 10 MiB, ENABLE_PUSH 0. */
    uint8_t settings[18];
    static const uint8_t want[18] = {0, 3, 0, 0, 0, 100, 0, 4, 0, 0xa0, 0, 0, 0, 2, 0, 0, 0, 0};
    CHECK_EQ_INT(url_decode("AAMAAABkAAQAoAAAAAIAAAAA", settings, sizeof settings), 18);
    CHECK(memcmp(settings, want, 18) == 0);
}

/* Every byte value, at every position in a group, at every tail length:
 * base64's encoding moved to the URL alphabet, its padding dropped. */
static void test_every_byte_survives_encoding_and_url_decoding(void) {
    uint8_t bytes[256 + 2];
    for (size_t i = 0; i < sizeof bytes; i++) bytes[i] = (uint8_t)(i * 167 + 13);
    for (size_t len = 0; len <= sizeof bytes; len += len < 8 ? 1 : 61) {
        char text[xBase64EncodedLen(sizeof bytes) + 1];
        size_t n = xBase64Encode(bytes, len, text);
        for (size_t i = 0; i < n; i++) text[i] = text[i] == '+' ? '-' : text[i] == '/' ? '_' : text[i];
        while (n && text[n - 1] == '=') n--;
        text[n] = '\0';
        uint8_t out[sizeof bytes];
        CHECK_EQ_INT(url_decode(text, out, sizeof out), (long)len);
        CHECK_MSG(memcmp(out, bytes, len) == 0, "%zu bytes", len);
    }
}

static void test_characters_outside_the_alphabet_are_refused(void) {
    static const char *const bad[] = {
        "Zm9+", "Zm9/", /* base64's digits, not base64url's */
        "Zm 9", "Zm9v\n", "Zm\t9", ".m9v", "Zm9v!A", "Zm9\xff", "\x80Zm9",
    };
    uint8_t out[8];
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++)
        CHECK_MSG(url_decode(bad[i], out, sizeof out) == -1, "%s", bad[i]);
    CHECK_EQ_INT(xBase64UrlDecode("Zm\0v", 4, out, sizeof out), -1);
    /* and the other way: base64 refuses base64url's digits */
    CHECK_EQ_INT(xBase64Decode("-_-_", 4, out, sizeof out), -1);
    CHECK_EQ_INT(xBase64Decode("+/+/", 4, out, sizeof out), 3);
}

static void test_padding_is_whole_and_only_at_the_end(void) {
    static const char *const bad[] = {
        "=",      "==",       "====",  /* padding alone */
        "Zg=",    "Zg===",    "Zm8==", /* not closing a group of 4 */
        "Z===",   "Zm9v====",          /* more than two */
        "Zg==Zg", "Zg==Zm9v", "Zm=v",  /* in the middle */
        "=Zm9",
    };
    uint8_t out[8];
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++)
        CHECK_MSG(url_decode(bad[i], out, sizeof out) == -1, "%s", bad[i]);
}

static void test_lengths_no_encoder_makes_are_refused(void) {
    uint8_t out[8];
    CHECK_EQ_INT(url_decode("Z", out, sizeof out), -1);     /* 6 bits: no byte */
    CHECK_EQ_INT(url_decode("Zm9vY", out, sizeof out), -1); /* a group, then 6 bits */
    /* Bits past the last byte must be zero: "Zh" is "f" with a stray bit. */
    CHECK_EQ_INT(url_decode("Zh", out, sizeof out), -1);
    CHECK_EQ_INT(url_decode("Zm9", out, sizeof out), -1);
    CHECK_EQ_INT(url_decode("Zm9=", out, sizeof out), -1);
    CHECK_EQ_INT(url_decode("Zg", out, sizeof out), 1);
}

static void test_output_that_does_not_fit_is_refused(void) {
    uint8_t out[6];
    CHECK_EQ_INT(url_decode("Zm9vYmFy", out, 6), 6);
    CHECK_EQ_INT(url_decode("Zm9vYmFy", out, 5), -1);
    CHECK_EQ_INT(url_decode("Zm9vYg", out, 4), 4);
    CHECK_EQ_INT(url_decode("Zm9vYg", out, 3), -1);
    CHECK_EQ_INT(url_decode("", out, 0), 0);
}

int main(void) {
    RUN(test_rfc4648_vectors_decode_with_or_without_padding);
    RUN(test_url_digits_stand_for_62_and_63);
    RUN(test_every_byte_survives_encoding_and_url_decoding);
    RUN(test_characters_outside_the_alphabet_are_refused);
    RUN(test_padding_is_whole_and_only_at_the_end);
    RUN(test_lengths_no_encoder_makes_are_refused);
    RUN(test_output_that_does_not_fit_is_refused);
    return CHECK_SUMMARY();
}
