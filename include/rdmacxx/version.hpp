#pragma once
/// @file
/// rdmacxx version macros and the language-level check.

#if !defined(__cplusplus) || __cplusplus < 202002L
#error "rdmacxx needs C++20 or later (-std=c++20)"
#endif

/// Major version of rdmacxx.
#define RDMACXX_VERSION_MAJOR 0
/// Minor version of rdmacxx.
#define RDMACXX_VERSION_MINOR 1
/// Patch version of rdmacxx.
#define RDMACXX_VERSION_PATCH 0
/// Version as MAJOR * 10000 + MINOR * 100 + PATCH; meson.build checks it against the project version.
#define RDMACXX_VERSION (RDMACXX_VERSION_MAJOR * 10000 + RDMACXX_VERSION_MINOR * 100 + RDMACXX_VERSION_PATCH)
/// Version as text, "MAJOR.MINOR.PATCH".
#define RDMACXX_VERSION_STRING "0.1.0"
