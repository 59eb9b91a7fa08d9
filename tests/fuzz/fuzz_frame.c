/* libFuzzer target: arbitrary bytes on the control socket. Splits frames
 * exactly as tcmd does (tcm__frame_next), decodes each with protobuf-c and
 * walks what it decoded. Built with clang -fsanitize=fuzzer,address,undefined;
 * the test suite runs it for a bounded time from tests/fuzz/corpus. */
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "frame.h"

static size_t walk(const Tcm__Request *req)
{
    size_t n = req->version;
    switch (req->body_case) {
    case TCM__REQUEST__BODY_CONFIG_SET:
        n += req->config_set->key ? strlen(req->config_set->key) : 0;
        n += req->config_set->value ? strlen(req->config_set->value) : 0;
        break;
    case TCM__REQUEST__BODY_CONFIG_GET:
        n += req->config_get->key ? strlen(req->config_get->key) : 0;
        break;
    case TCM__REQUEST__BODY_HELLO:
        n += req->hello->pid;
        break;
    default:
        break;
    }
    return n;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    volatile size_t sink = 0;
    size_t pos = 0;
    for (;;) {
        const uint8_t *payload;
        size_t n;
        int r = tcm__frame_next(data + pos, size - pos, &payload, &n);
        if (r <= 0)
            break;
        Tcm__Request *req = tcm__request__unpack(NULL, n, payload);
        if (req) {
            sink += walk(req);
            tcm__request__free_unpacked(req, NULL);
        }
        pos += 4 + n;
    }
    (void)sink;
    return 0;
}
