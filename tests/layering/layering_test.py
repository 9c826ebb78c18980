"""The folders' dependency rule, checked on the sources and on the CMake links.

Each source folder is one layer with one CMake library target. A folder may
include headers of, and its targets may link, only the folders listed for it
in LAYERS; the engine port and the router hold no transport type; no
CMakeLists.txt sets a global include path. README "Architecture" draws the
same picture.
"""
import glob
import os
import re
import unittest

ROOT = os.environ.get("NARWHAL_SOURCE_DIR",
                      os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))

# folder -> the folders it may depend on. The most specific folder owns a file.
LAYERS = {
    "engines": set(),
    "engines/http": {"engines"},
    "engines/sim": {"engines", "version"},
    "router/common": {"engines"},
    "router/fleet": {"router/common", "engines"},
    "router": {"router/fleet", "router/common", "engines"},
    "server": {"router", "router/fleet", "router/common", "engines/http", "engines", "proto",
               "version"},
    "python": {"server", "router", "router/common", "engines/http", "engines"},
    # The load driver reaches the router over the wire only: the generated
    # API, and the server's thread tuning (no router, no door).
    "tools/bench": {"server", "proto", "version"},
    "proto": set(),
    "version": set(),
}
# Only the embedded default fleet reaches the simulator from the router's side.
SIM_DOOR = {"server/embedded_fleet.h", "server/embedded_fleet.cc", "server/server.cc"}
# Headers that would bring a transport into the port or the request path.
TRANSPORT = re.compile(r'^#include [<"](boost/beast|boost/asio/ip|httplib\.h|grpcpp|grpc/|'
                       r'narwhal/v1/|narwhal/admin/|simdjson)', re.M)
SOURCE = re.compile(r"\.(h|cc)$")


def owner(path):
    best = None
    for folder in LAYERS:
        if (path.startswith(folder + "/") and
                (best is None or len(folder) > len(best))):
            best = folder
    return best


def sources(folder):
    out = []
    for path in glob.glob(folder + "/**/*", root_dir=ROOT, recursive=True):
        if SOURCE.search(path) and owner(path) == folder:
            out.append(path)
    return sorted(out)


def read(path):
    with open(os.path.join(ROOT, path), encoding="utf-8") as f:
        return f.read()


def includes(path):
    return re.findall(r'^#include "([^"]+)"', read(path), re.M)


def cmake_files():
    return [p for p in glob.glob("**/CMakeLists.txt", root_dir=ROOT, recursive=True)
            if not p.startswith(("build", "tests/", "."))] + ["CMakeLists.txt"]


def library_targets():
    """narwhal_* library target -> the folder whose CMakeLists.txt declares it."""
    targets = {}
    for cm in cmake_files():
        folder = os.path.dirname(cm)
        for name in re.findall(r"add_library\((narwhal_\w+)", read(cm)):
            targets[name] = folder
    return targets


class IncludeRuleTest(unittest.TestCase):
    def test_every_folder_has_sources(self):
        for folder in LAYERS:
            self.assertTrue(sources(folder) or folder in ("proto", "version"), folder)

    def test_each_folder_includes_only_the_layers_below_it(self):
        bad = []
        for folder, allowed in LAYERS.items():
            for path in sources(folder):
                for inc in includes(path):
                    dep = owner(inc)
                    if dep is None or dep == folder:
                        continue
                    if dep == "engines/sim" and path in SIM_DOOR:
                        continue
                    if dep not in allowed:
                        bad.append(f"{path} includes {inc} ({folder} -> {dep})")
        self.assertEqual(bad, [])

    def test_the_engine_port_and_the_router_hold_no_transport_type(self):
        bad = []
        for folder in ("engines", "router", "router/common", "router/fleet"):
            for path in sources(folder):
                if path.endswith(".h") and TRANSPORT.search(read(path)):
                    bad.append(path)
        self.assertEqual(bad, [])

    def test_the_rule_would_catch_an_upward_include(self):
        # The check above is not vacuous: the request path does include the
        # control plane, and the control plane never the request path.
        ups = [inc for p in sources("router") for inc in includes(p)
               if owner(inc) == "router/fleet"]
        self.assertTrue(ups)
        self.assertNotIn("router/fleet", LAYERS["router/common"])


# Inside the server library: each part in its folder, and the two doors
# apart. A door's files never include the other door's; the config reader
# includes neither door, and the connection pieces both doors share
# (server/net) include no door. Admission, the status table and the shared pieces
# stay at server/.
SERVER_PARTS = {
    "server/grpc": {"server/http", "server/admin"},
    "server/http": {"server/grpc", "server/admin"},
    "server/config": {"server/grpc", "server/http", "server/admin"},
    # What both doors' connections share: sockets, TLS, timers.
    "server/net": {"server/grpc", "server/http", "server/admin", "server/config"},
}


def server_part(path):
    for part in SERVER_PARTS:
        if path.startswith(part + "/"):
            return part
    return None


class ServerPartsTest(unittest.TestCase):
    def test_each_door_has_its_folder(self):
        for part in SERVER_PARTS:
            self.assertTrue(glob.glob(part + "/*.cc", root_dir=ROOT), part)
        stray = [p for p in sources("server")
                 if "/" not in p[len("server/"):] and
                 re.match(r"server/(grpc_|openai_shim|inference_service|config_|engine_options)", p)]
        self.assertEqual(stray, [], "a door's or the config's file outside its folder")

    def test_the_doors_do_not_include_each_other(self):
        bad = []
        for path in sources("server"):
            part = server_part(path)
            if part is None:
                continue
            for inc in includes(path):
                if server_part(inc) in SERVER_PARTS[part]:
                    bad.append(f"{path} includes {inc}")
        self.assertEqual(bad, [])


class CMakeLinkTest(unittest.TestCase):
    def test_no_global_include_directories(self):
        for cm in cmake_files():
            self.assertNotRegex(read(cm), r"(?m)^\s*include_directories\(", cm)

    def test_each_library_is_declared_in_its_own_folder(self):
        targets = library_targets()
        for name in ("narwhal_engines", "narwhal_engines_http", "narwhal_sim",
                     "narwhal_router_common", "narwhal_fleet", "narwhal_router",
                     "narwhal_server", "narwhal_embedded_fleet"):
            self.assertIn(name, targets)
        self.assertEqual(targets["narwhal_engines"], "engines")
        self.assertEqual(targets["narwhal_engines_http"], "engines/http")
        self.assertEqual(targets["narwhal_sim"], "engines/sim")
        self.assertEqual(targets["narwhal_router_common"], "router/common")
        self.assertEqual(targets["narwhal_fleet"], "router/fleet")
        self.assertEqual(targets["narwhal_router"], "router")

    def test_each_library_links_only_the_layers_its_folder_may_use(self):
        targets = library_targets()
        bad = []
        for cm in cmake_files():
            text = read(cm)
            for name, body in re.findall(r"target_link_libraries\((narwhal_\w+)([^)]*)\)", text):
                if name not in targets:
                    continue  # executables and test helpers
                folder = targets[name]
                allowed = LAYERS.get(folder, set()) | {folder}
                for dep in re.findall(r"\bnarwhal_\w+", body):
                    dep_folder = targets.get(dep)
                    if dep_folder is None or dep_folder in allowed:
                        continue
                    if name == "narwhal_embedded_fleet" and dep_folder == "engines/sim":
                        continue
                    bad.append(f"{name} ({folder}) links {dep} ({dep_folder})")
        self.assertEqual(bad, [])

    def test_the_server_library_does_not_link_the_simulator(self):
        text = read("server/CMakeLists.txt")
        body = re.search(r"target_link_libraries\(narwhal_server([^)]*)\)", text).group(1)
        self.assertNotIn("narwhal_sim", body.split())


if __name__ == "__main__":
    unittest.main()
