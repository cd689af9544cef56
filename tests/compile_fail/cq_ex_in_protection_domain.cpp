// expect: an extended CQ is made on a context or in a parent_domain, not in a protection_domain
// A CQ asked for in a plain protection domain must not compile: verbs would not say (rxe ignores
// IBV_CQ_INIT_ATTR_MASK_PD with a plain PD; mlx5 refuses it with EINVAL only at run time).
#include "rdmacxx/cq_ex.hpp"

namespace rx = rdmacxx;

void misuse(rx::protection_domain& pd) { rx::completion_queue_ex<rx::busy_poll> const cq(pd, 16); }
