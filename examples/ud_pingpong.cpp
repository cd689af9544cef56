// ud_pingpong: a UD ping-pong over rdmacxx, modelled on rdma-core's ibv_ud_pingpong (same flags,
// same out-of-band exchange). The program is examples/pingpong.hpp, templated on the transport.
#include "pingpong.hpp"

int main(int argc, char** argv) { return pingpong::main<rdmacxx::ud>(argc, argv, 1024); }
