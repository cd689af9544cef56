// end_port: resolves an end-port description the way every rdmacxx program should take one on
// its command line, and prints the port and the GID connections from it would use.
//
// Usage: end_port [DESCRIPTION] [-g GID_INDEX] [-t v1|v2] [-l LEVEL]
//   DESCRIPTION  "" (first active port), DEVICE, DEVICE/PORT, a port GID or a port GUID
//   -g INDEX     use this GID index instead of the selected one
//   -t v1|v2     select among RoCE v1 or v2 GIDs only
//   -l LEVEL     dump_detailed level for errors (default 1)
#include <rdmacxx/verbs.hpp>

#include <cstdlib>
#include <cstring>
#include <iostream>
#include <string>

namespace rx = rdmacxx;

int main(int argc, char** argv) {
    std::string description;
    rx::gid_selector want;
    int level = 1;
    for (int i = 1; i < argc; ++i) {
        if (std::strcmp(argv[i], "-g") == 0 && i + 1 < argc)
            want.index = static_cast<std::uint32_t>(std::atoi(argv[++i]));
        else if (std::strcmp(argv[i], "-t") == 0 && i + 1 < argc) {
            std::string const t = argv[++i];
            want.type = t == "v1" ? rx::gid_type::roce_v1 : rx::gid_type::roce_v2;
        } else if (std::strcmp(argv[i], "-l") == 0 && i + 1 < argc)
            level = std::atoi(argv[++i]);
        else if (argv[i][0] == '-' && argv[i][1] != '\0') {
            std::cerr << "usage: " << argv[0] << " [DESCRIPTION] [-g GID_INDEX] [-t v1|v2] [-l LEVEL]\n";
            return 2;
        } else
            description = argv[i];
    }
    try {
        rx::opened_end_port const where = rx::get_end_port(description, want);
        auto const& attr = where.attributes();
        std::cout << "end port \"" << description << "\" is " << where.to_string() << '\n'
                  << "  device:      " << where.context().name() << " (node GUID " << where.context().device().guid()
                  << ")\n"
                  << "  port:        " << static_cast<unsigned>(where.port_num()) << ", " << attr.state_name() << ", "
                  << attr.link_layer_name() << ", " << attr.width_name() << " " << attr.speed_name() << ", MTU "
                  << attr.active_mtu_bytes() << ", LID " << attr.lid() << '\n'
                  << "  GID:         " << where.gid().to_string() << '\n';
    } catch (rx::error& e) {
        e.push_context("Failed resolving end port \"" + description + "\"");
        e.dump_detailed(std::cerr, "E:", level);
        return 1;
    }
    return 0;
}
