// uc_pingpong: a UC ping-pong over rdmacxx, modelled on rdma-core's ibv_uc_pingpong (same flags,
// same out-of-band exchange). The program is examples/pingpong.hpp, templated on the transport.
#include "pingpong.hpp"

int main(int argc, char** argv) { return pingpong::main<rdmacxx::uc>(argc, argv, 4096); }
