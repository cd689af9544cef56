#pragma once
/// @file
/// The C boundary: the only header that includes libibverbs. Everything else in rdmacxx
/// includes this one, never <infiniband/verbs.h> directly.

#include "rdmacxx/version.hpp"

#include <infiniband/verbs.h>

/// Marks a function that only runs on a failure path: kept out of line and out of the hot
/// instruction stream.
#define RDMACXX_COLD [[gnu::cold, gnu::noinline]]
