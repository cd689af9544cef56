#include "rdmacxx/access.hpp"

#include <doctest/doctest.h>

namespace rx = rdmacxx;

static_assert(rx::to_native(rx::access::local_write | rx::access::remote_write) ==
              (IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE));
static_assert(rx::has(rx::all_remote, rx::access::remote_atomic));
static_assert(!rx::has(rx::access::local_write, rx::access::remote_read));

TEST_CASE("access flags combine into the verbs flag word") {
    rx::access a = rx::access::none;
    CHECK(rx::to_native(a) == 0);
    a |= rx::access::remote_read;
    a |= rx::access::local_write;
    CHECK(rx::to_native(a) == (IBV_ACCESS_REMOTE_READ | IBV_ACCESS_LOCAL_WRITE));
    CHECK(rx::has(a, rx::access::remote_read));
    CHECK_FALSE(rx::has(a, rx::access::remote_write));
    CHECK((a & rx::access::remote_write) == rx::access::none);
    CHECK(rx::to_native(rx::all_remote) ==
          (IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_ATOMIC));
}
