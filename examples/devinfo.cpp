// devinfo: the host's RDMA devices, their ports and GID tables, like rdma-core's `ibv_devinfo -v`
// but shorter.
//
// Usage: devinfo [-d DEVICE] [-v]
//   -d DEVICE  only this device
//   -v         also the P_Key table, the device limits and capabilities (typed, from
//              ibv_query_device_ex), whether thread and parent domains are there (probed)
//              and the GID table of every port read in one call
#include <rdmacxx/verbs.hpp>

#include <cstdio>
#include <cstring>
#include <iostream>
#include <string>

namespace rx = rdmacxx;

namespace {

// The device query does not report the largest inline payload: a QP asks for one at creation and
// the provider grants it or refuses. Binary search over RC QPs (each created and destroyed).
std::uint32_t probe_max_inline(rx::context& ctx) {
    rx::protection_domain pd(ctx);
    rx::completion_queue<rx::busy_poll> cq(ctx, 4);
    auto fits = [&](std::uint32_t bytes) {
        try {
            rx::queue_pair<rx::rc, rx::busy_poll> qp(pd, cq, cq, rx::qp_capabilities{.max_inline_data = bytes});
            return true;
        } catch (rx::sys_error const&) {
            return false;
        }
    };
    std::uint32_t lo = 0, hi = 1U << 20; // fits(lo); hi is past any device's inline limit
    while (hi - lo > 1) {
        std::uint32_t const mid = lo + (hi - lo) / 2;
        (fits(mid) ? lo : hi) = mid;
    }
    return lo;
}

// Thread and parent domains are not in the device query either: the single-threaded resource
// policy is tried (a thread domain, a parent domain with it, an extended CQ in that), and what the
// device refuses first is named.
std::string probe_domains(rx::context& ctx) {
    try {
        rx::protection_domain pd(ctx);
        rx::thread_domain td(ctx);
        rx::parent_domain const parent(pd, td);
        rx::completion_queue_ex<rx::busy_poll> const cq(parent, 1);
        return "yes (a single-threaded CQ made in a parent domain with a thread domain)";
    } catch (rx::not_supported_error const& e) {
        return "no (" + e.verb() + ": " + e.code().message() + ")";
    }
}

void print_device(rx::device dev, bool verbose) {
    rx::context ctx = dev.open();
    auto const attr = ctx.query_device();
    std::cout << "hca_id: " << dev.name() << '\n'
              << "\ttransport:\t\t" << dev.transport_type_name() << '\n'
              << "\tnode_type:\t\t" << dev.node_type_name() << '\n'
              << "\tnode_guid:\t\t" << dev.guid() << '\n'
              << "\tsys_image_guid:\t\t" << rx::guid::from_network(attr.orig_attr.sys_image_guid) << '\n'
              << "\tfw_ver:\t\t\t" << (attr.orig_attr.fw_ver[0] != '\0' ? attr.orig_attr.fw_ver : "(none)") << '\n';
    try {
        std::cout << "\tindex:\t\t\t" << dev.index() << '\n';
    } catch (rx::sys_error const& e) {
        std::cout << "\tindex:\t\t\t(" << e.code().message() << ")\n";
    }
    if (verbose)
        std::cout << "\tmax_qp:\t\t\t" << attr.orig_attr.max_qp << '\n'
                  << "\tmax_qp_wr:\t\t" << attr.orig_attr.max_qp_wr << '\n'
                  << "\tmax_cq:\t\t\t" << attr.orig_attr.max_cq << '\n'
                  << "\tmax_cqe:\t\t" << attr.orig_attr.max_cqe << '\n'
                  << "\tmax_mr:\t\t\t" << attr.orig_attr.max_mr << '\n'
                  << "\tmax_mr_size:\t\t" << attr.orig_attr.max_mr_size << '\n'
                  << "\tmax_sge:\t\t" << attr.orig_attr.max_sge << '\n'
                  << "\tmax_srq:\t\t" << attr.orig_attr.max_srq << '\n'
                  << "\tmax_pkeys:\t\t" << attr.orig_attr.max_pkeys << '\n';
    if (verbose) {
        auto const l = ctx.limits();
        char mask[24];
        std::snprintf(mask, sizeof mask, "0x%llx", static_cast<unsigned long long>(l.cap_flags()));
        auto yes = [](bool b) { return b ? "yes" : "no"; };
        std::cout << "\tatomic_cap:\t\t" << rx::to_string(l.atomics()) << '\n'
                  << "\tmax_qp_rd_atom:\t\t" << l.max_responder_resources() << '\n'
                  << "\tmax_qp_init_rd_atom:\t" << l.max_initiator_depth() << '\n'
                  << "\tmax_sge_rd:\t\t" << l.max_sge_rd() << '\n'
                  << "\tmax_mw:\t\t\t" << l.max_mw() << '\n'
                  << "\tmax_ah:\t\t\t" << l.max_ah() << '\n'
                  << "\tnum_comp_vectors:\t" << ctx.num_comp_vectors() << '\n'
                  << "\tdevice_cap_flags_ex:\t" << mask << '\n'
                  << "\t\tmemory windows:\t\t" << yes(l.memory_windows()) << " (type 2A "
                  << yes(l.memory_window_type_2a()) << ", 2B " << yes(l.memory_window_type_2b()) << ")\n"
                  << "\t\tmem mgt extensions:\t" << yes(l.memory_management_extensions()) << '\n'
                  << "\t\tresize QP / SRQ:\t" << yes(l.resize_max_wr()) << " / " << yes(l.srq_resize()) << '\n'
                  << "\t\tRC RNR NAK gen:\t\t" << yes(l.rc_rnr_nak_gen()) << '\n'
                  << "\t\tUD IP checksum:\t\t" << yes(l.ud_ip_csum()) << '\n'
                  << "\todp_general_caps:\t" << l.odp_general_caps() << " (ODP " << yes(l.on_demand_paging())
                  << ", RC ops mask " << l.odp_rc_caps() << ")\n"
                  << "\tcompletion_timestamp:\tmask " << l.completion_timestamp_mask() << ", clock "
                  << l.core_clock_khz() << " kHz\n"
                  << "\tmax_inline_data:\t" << probe_max_inline(ctx)
                  << " (probed: the largest an RC QP is created with)\n"
                  << "\tthread/parent domains:\t" << probe_domains(ctx) << '\n';
    }
    std::uint8_t const ports = ctx.port_count();
    std::cout << "\tphys_port_cnt:\t\t" << static_cast<unsigned>(ports) << '\n';
    for (unsigned p = 1; p <= ports; ++p) {
        auto const num = static_cast<std::uint8_t>(p);
        auto const port = ctx.query_port(num);
        std::cout << "\t\tport:\t" << p << '\n'
                  << "\t\t\tstate:\t\t\t" << port.state_name() << " (" << static_cast<int>(port.state()) << ")\n"
                  << "\t\t\tmax_mtu:\t\t" << rx::mtu_bytes(port.max_mtu()) << '\n'
                  << "\t\t\tactive_mtu:\t\t" << port.active_mtu_bytes() << '\n'
                  << "\t\t\tsm_lid:\t\t\t" << port.native().sm_lid << '\n'
                  << "\t\t\tport_lid:\t\t" << port.lid() << '\n'
                  << "\t\t\tlink_layer:\t\t" << port.link_layer_name() << '\n'
                  << "\t\t\tactive_width:\t\t" << port.width_name() << '\n'
                  << "\t\t\tactive_speed:\t\t" << port.speed_name() << '\n';
        for (auto const& e : ctx.gid_table(num))
            std::cout << "\t\t\tGID[" << e.index << "]:\t\t" << e.gid << ", " << rx::to_string(e.type)
                      << (e.netdev_name().empty() ? "" : ", " + e.netdev_name()) << '\n';
        try {
            auto const chosen = ctx.select_gid(num);
            std::cout << "\t\t\tselected GID:\t\t[" << chosen.index << "] " << chosen.gid << '\n';
        } catch (rx::error const& e) {
            std::cout << "\t\t\tselected GID:\t\t(none: " << e.what() << ")\n";
        }
        if (verbose) {
            auto const pkeys = ctx.pkey_table(num);
            for (std::size_t i = 0; i < pkeys.size(); ++i)
                if (pkeys[i] != 0) {
                    char buf[8];
                    std::snprintf(buf, sizeof buf, "0x%04x", static_cast<unsigned>(pkeys[i]));
                    std::cout << "\t\t\tP_Key[" << i << "]:\t\t" << buf << '\n';
                }
        }
    }
    if (verbose) {
        auto const table = ctx.gid_table(); // every port, one ibv_query_gid_table(3) call
        std::cout << "\tgid_table:\t\t" << table.size() << " entries\n";
        for (auto const& e : table)
            std::cout << "\t\tport " << e.port << ' ' << e.to_string() << '\n';
    }
}

} // namespace

int main(int argc, char** argv) {
    std::string only;
    bool verbose = false;
    for (int i = 1; i < argc; ++i) {
        if (std::strcmp(argv[i], "-v") == 0)
            verbose = true;
        else if (std::strcmp(argv[i], "-d") == 0 && i + 1 < argc)
            only = argv[++i];
        else {
            std::cerr << "usage: " << argv[0] << " [-d DEVICE] [-v]\n";
            return 2;
        }
    }
    try {
        rx::device_list const devices;
        if (devices.empty()) {
            std::cout << "No IB devices found\n";
            return 1;
        }
        if (!only.empty()) {
            print_device(devices.find(only), verbose);
        } else {
            for (rx::device d : devices)
                print_device(d, verbose);
        }
    } catch (rx::error const& e) {
        e.dump_detailed(std::cerr, "E:", 1);
        return 1;
    }
    return 0;
}
