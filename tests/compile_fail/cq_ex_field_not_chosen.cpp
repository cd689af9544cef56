// expect: this CQ was not created with wc_field::src_qp
// Reading a field an extended CQ was not created with must not compile.
#include "rdmacxx/cq_ex.hpp"

namespace rx = rdmacxx;

void misuse(rx::completion_queue_ex<rx::busy_poll, rx::wc_fields<rx::wc_field::byte_len>>& cq) {
    (void)cq.poll([](auto const& wc) { (void)wc.src_qp(); });
}
