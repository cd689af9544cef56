// cm::address::resolve reads all of its text: an embedded NUL is refused before getaddrinfo(3).
#include "rdmacxx/cm/address.hpp"

#include <doctest/doctest.h>

#include <string>

namespace cm = rdmacxx::cm;

TEST_CASE("cm: a host with an embedded NUL is refused, not resolved up to the NUL") {
    for (std::string const& host : {std::string{"::1\0garbage", 11}, std::string{"127.0.0.1\0.evil.example", 23},
                                    std::string{"\0", 1}, std::string{"localhost\0", 10}}) {
        CAPTURE(host);
        CHECK_THROWS_WITH_AS((void)cm::address::resolve(host, 7471), doctest::Contains("holds a NUL character"),
                             rdmacxx::argument_error);
    }
    CHECK_THROWS_WITH_AS(
        (void)cm::address::resolve(std::string{"::1\0garbage", 11}, 1),
        "cannot resolve host \"::1\\0garbage\": it holds a NUL character at offset 3 (Invalid argument)",
        rdmacxx::argument_error);
    CHECK(cm::address::resolve("::1", 1).to_string() == "[::1]:1"); // the same text without the NUL resolves
}
