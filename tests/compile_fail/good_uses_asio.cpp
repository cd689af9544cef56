// expect: compiles
// The Asio adapter's namespace is rdmacxx::io, so that it shadows nothing: with
// `using namespace rdmacxx;`, Asio's own `asio::` names stay unambiguous beside rdmacxx's (they
// did not while the adapter was rdmacxx::asio). See docs/asio.md.
#include "rdmacxx/asio.hpp"
#include "rdmacxx/rdmacxx.hpp"

#include <asio/io_context.hpp>
#include <asio/post.hpp>

#include <type_traits>

using namespace rdmacxx;

static_assert(std::is_class_v<io::completion_dispatcher>);
static_assert(std::is_class_v<rdmacxx::io::completion_dispatcher>);

int use() {
    asio::io_context ctx;
    int ran = 0;
    asio::post(ctx, [&ran] { ++ran; });
    [[maybe_unused]] io::completion_dispatcher* dispatcher = nullptr;
    [[maybe_unused]] protection_domain* pd = nullptr; // rdmacxx's names, unqualified, beside Asio's
    return static_cast<int>(ctx.run()) + ran;
}
