// rc_pingpong: a RC ping-pong over rdmacxx, modelled on rdma-core's ibv_rc_pingpong (same flags,
// same out-of-band exchange). The program is examples/pingpong.hpp, templated on the transport.
#include "pingpong.hpp"

int main(int argc, char** argv) { return pingpong::main<rdmacxx::rc>(argc, argv, 4096); }
