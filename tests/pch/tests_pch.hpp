// The precompiled header of the doctest programs: what nearly every test file includes, parsed
// once per program instead of once per file. Each test file still includes what it uses.
#include "rdmacxx/rdmacxx.hpp"

#include <doctest/doctest.h>

#include <array>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <optional>
#include <sstream>
#include <string>
#include <thread>
#include <vector>
