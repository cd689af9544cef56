// expect: the private data is larger than the CM message can carry
// A 64-byte struct as the private data of an RC connect request (56 bytes at most) must not compile.
#include "rdmacxx/rdmacxx.hpp"

namespace rx = rdmacxx;
namespace cm = rdmacxx::cm;

struct too_big {
    char bytes[64];
};

void misuse(too_big const& v) {
    auto const data = cm::to_private_data<cm::private_data_message::connect, rx::rc>(v);
    (void)data;
}
