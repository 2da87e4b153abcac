/* sha256.h: FIPS 180-4 SHA-256, used by the on-disk kernel binary cache: the key of an entry and the
 * checksum of its payload. */
#ifndef TL_SHA256_H
#define TL_SHA256_H
#include <stddef.h>
#include <stdint.h>

typedef struct { uint32_t h[8]; uint64_t len; unsigned char buf[64]; size_t fill; } tl_sha256;

void tl_sha256_init(tl_sha256 *s);
void tl_sha256_update(tl_sha256 *s, const void *data, size_t n);
void tl_sha256_final(tl_sha256 *s, unsigned char out[32]);   /* finalises: the raw digest */
void tl_sha256_hex(tl_sha256 *s, char out[65]);              /* finalises: lowercase hex */
#endif
