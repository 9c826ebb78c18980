// Reading the fleet file safely (server/config/bounded_file.h): only a
// regular file is opened — a FIFO given as --config hung start-up forever —
// and at most 16 MiB of it is read; and the file as a live input
// (server/config/config_file.h): re-read on demand and told apart by its
// content, across a Kubernetes ConfigMap update that swaps a symlink.
#include "server/config/config_file.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <functional>
#include <future>
#include <nlohmann/json.hpp>
#include <string>

#include "absl/strings/match.h"
#include "server/config/bounded_file.h"
#include "server/config/config_loader.h"

namespace narwhal::server {
namespace {

using json = nlohmann::json;

json Fleet(int max_attempts) {
  return {{"model", "m"},
          {"engines", {{{"iid", "e0"}, {"url", "http://127.0.0.1:1"}}}},
          {"serving", {{"max_attempts", max_attempts}}}};
}

class ScratchDir : public ::testing::Test {
 protected:
  void SetUp() override {
    const char* tmp = std::getenv("TMPDIR");
    std::string pattern =
        std::string(tmp != nullptr && *tmp != '\0' ? tmp : "/tmp") + "/config_file_XXXXXX";
    ASSERT_NE(::mkdtemp(pattern.data()), nullptr);
    dir_ = pattern;
  }
  void TearDown() override {
    std::error_code ignored;
    std::filesystem::remove_all(dir_, ignored);
  }

  std::string Path(const std::string& name) const { return dir_ + "/" + name; }

  static void Write(const std::string& path, const std::string& text) {
    std::ofstream out(path, std::ios::binary | std::ios::trunc);
    out << text;
    ASSERT_TRUE(out.good()) << path;
  }

  std::string dir_;
};

// Runs `read` on a thread; when it has not returned within 10 s (blocked in
// open() on the FIFO), opens the FIFO for writing so that it can return,
// and reports the hang.
std::string WithoutHanging(const std::string& fifo, std::function<std::string()> read) {
  auto done = std::async(std::launch::async, std::move(read));
  if (done.wait_for(std::chrono::seconds(10)) != std::future_status::ready) {
    const int writer = ::open(fifo.c_str(), O_WRONLY | O_NONBLOCK);
    if (writer >= 0) ::close(writer);
    done.wait();
    ADD_FAILURE() << "reading the FIFO " << fifo << " blocked";
  }
  return done.get();
}

using BoundedFileTest = ScratchDir;

TEST_F(BoundedFileTest, FifoAsConfigIsRefusedWithoutBlocking) {
  const std::string fifo = Path("fleet.json");
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  const std::string message = WithoutHanging(fifo, [&] {
    auto loaded = LoadFleetConfig(fifo);
    return loaded.ok() ? std::string("loaded") : std::string(loaded.status().message());
  });
  EXPECT_EQ(message, "config " + fifo + ": cannot read: not a regular file (a FIFO)");
}

TEST_F(BoundedFileTest, SymlinkToAFifoIsRefusedToo) {
  const std::string fifo = Path("pipe");
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  const std::string link = Path("fleet.json");
  ASSERT_EQ(::symlink(fifo.c_str(), link.c_str()), 0);
  const std::string message = WithoutHanging(fifo, [&] {
    auto text = config_file::ReadBoundedFile(link, 1024);
    return text.ok() ? std::string("read") : std::string(text.status().message());
  });
  EXPECT_EQ(message, "not a regular file (a FIFO)");
}

TEST_F(BoundedFileTest, OtherKindsAreNamed) {
  auto dir = LoadFleetConfig(dir_);
  ASSERT_FALSE(dir.ok());
  EXPECT_EQ(dir.status().message(),
            "config " + dir_ + ": cannot read: not a regular file (a directory)");
  EXPECT_EQ(dir.status().code(), absl::StatusCode::kInvalidArgument);

  auto device = config_file::ReadBoundedFile("/dev/zero", 1024);
  ASSERT_FALSE(device.ok());
  EXPECT_EQ(device.status().message(), "not a regular file (a character device)");

  const std::string socket_path = Path("s");
  const int fd = ::socket(AF_UNIX, SOCK_STREAM, 0);
  ASSERT_GE(fd, 0);
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  std::snprintf(addr.sun_path, sizeof addr.sun_path, "%s", socket_path.c_str());
  if (socket_path.size() < sizeof addr.sun_path &&
      ::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0) {
    auto socket = config_file::ReadBoundedFile(socket_path, 1024);
    ASSERT_FALSE(socket.ok());
    EXPECT_EQ(socket.status().message(), "not a regular file (a socket)");
  }
  ::close(fd);

  auto missing = LoadFleetConfig(Path("missing.json"));
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(missing.status().message(),
            "config " + Path("missing.json") + ": cannot read: No such file or directory");
}

TEST_F(BoundedFileTest, ReadsAtMostTheBound) {
  const std::string path = Path("f");
  Write(path, std::string(100, 'x'));
  EXPECT_EQ(*config_file::ReadBoundedFile(path, 100), std::string(100, 'x'));
  auto over = config_file::ReadBoundedFile(path, 99);
  ASSERT_FALSE(over.ok());
  EXPECT_EQ(over.status().message(), "larger than 99 bytes");
  Write(path, "");
  EXPECT_EQ(*config_file::ReadBoundedFile(path, 0), "");
}

TEST_F(BoundedFileTest, ConfigOver16MiBIsRefusedUnparsed) {
  const std::string path = Path("fleet.json");
  const std::string text = Fleet(1).dump();
  Write(path, text + std::string((16u << 20) - text.size(), ' '));
  EXPECT_TRUE(LoadFleetConfig(path).ok());  // exactly 16 MiB: read
  Write(path, text + std::string((16u << 20) - text.size() + 1, ' '));
  auto loaded = LoadFleetConfig(path);
  ASSERT_FALSE(loaded.ok());
  EXPECT_EQ(loaded.status().message(),
            "config " + path + ": cannot read: larger than 16777216 bytes");
}

TEST_F(BoundedFileTest, SymlinkToARegularFileIsRead) {
  Write(Path("real.json"), Fleet(2).dump());
  ASSERT_EQ(::symlink("real.json", Path("fleet.json").c_str()), 0);
  auto loaded = LoadFleetConfig(Path("fleet.json"));
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  EXPECT_EQ(loaded->serving.max_attempts, 2);
}

// The layout kubelet gives a ConfigMap volume, and its update: the new
// content in a new timestamped directory, a temporary `..data_tmp` symlink
// to it renamed over `..data` (one atomic step), the old directory removed.
class KubeletVolume {
 public:
  explicit KubeletVolume(std::string dir) : dir_(std::move(dir)) {}

  // Publishes `text` as the key `fleet.json` in version `version`.
  void Publish(const std::string& version, const std::string& text) {
    const std::string data = "..2026_" + version;
    std::filesystem::create_directory(dir_ + "/" + data);
    std::ofstream(dir_ + "/" + data + "/fleet.json") << text;
    std::filesystem::create_symlink(data, dir_ + "/..data_tmp");
    std::filesystem::rename(dir_ + "/..data_tmp", dir_ + "/..data");
    if (!current_.empty()) std::filesystem::remove_all(dir_ + "/" + current_);
    current_ = data;
    if (!std::filesystem::is_symlink(dir_ + "/fleet.json")) {
      std::filesystem::create_symlink("..data/fleet.json", dir_ + "/fleet.json");
    }
  }

  std::string path() const { return dir_ + "/fleet.json"; }

 private:
  std::string dir_;
  std::string current_;
};

using ConfigFileTest = ScratchDir;

TEST_F(ConfigFileTest, SeesAConfigMapUpdateThroughTheSymlinkSwap) {
  KubeletVolume volume(dir_);
  volume.Publish("01_01_00_00_00.1", Fleet(1).dump());
  ConfigFile file(volume.path());
  EXPECT_TRUE(*file.Changed());  // nothing seen yet
  auto first = file.Load();
  ASSERT_TRUE(first.ok()) << first.status();
  EXPECT_EQ(first->serving.max_attempts, 1);
  EXPECT_TRUE(file.changed());
  EXPECT_EQ(file.sha256(), Sha256Hex(Fleet(1).dump()));
  EXPECT_FALSE(*file.Changed());

  volume.Publish("01_01_00_01_00.2", Fleet(3).dump());
  EXPECT_TRUE(*file.Changed());
  EXPECT_TRUE(*file.Changed());  // asking does not consume the change
  auto second = file.Load();
  ASSERT_TRUE(second.ok()) << second.status();
  EXPECT_EQ(second->serving.max_attempts, 3);
  EXPECT_TRUE(file.changed());
  EXPECT_FALSE(*file.Changed());

  // A new directory, inode and mtime with the same bytes: no change.
  volume.Publish("01_01_00_02_00.3", Fleet(3).dump());
  EXPECT_FALSE(*file.Changed());
  ASSERT_TRUE(file.Load().ok());
  EXPECT_FALSE(file.changed());
}

TEST_F(ConfigFileTest, SameSizeAndMtimeWithOtherBytesIsAChange) {
  const std::string path = Path("fleet.json");
  Write(path, Fleet(1).dump());
  ConfigFile file(path);
  ASSERT_TRUE(file.Load().ok());
  const auto mtime = std::filesystem::last_write_time(path);
  Write(path, Fleet(2).dump());  // same length
  std::filesystem::last_write_time(path, mtime);
  EXPECT_TRUE(*file.Changed());
}

TEST_F(ConfigFileTest, AnInvalidFileIsSeenOnceAndReadErrorsChangeNothing) {
  const std::string path = Path("fleet.json");
  Write(path, Fleet(1).dump());
  ConfigFile file(path);
  ASSERT_TRUE(file.Load().ok());
  const std::string good = file.sha256();

  Write(path, Fleet(9).dump());
  auto invalid = file.Load();
  ASSERT_FALSE(invalid.ok());
  EXPECT_EQ(invalid.status().message(),
            "config " + path + ": serving.max_attempts must be between 1 and 3 (got 9)");
  EXPECT_TRUE(file.changed());
  EXPECT_NE(file.sha256(), good);
  EXPECT_FALSE(*file.Changed());  // the poll does not report it again

  // Gone for a moment (a non-atomic editor save): an error, nothing forgotten.
  std::filesystem::remove(path);
  EXPECT_EQ(file.Changed().status().code(), absl::StatusCode::kNotFound);
  auto gone = file.Load();
  ASSERT_FALSE(gone.ok());
  EXPECT_TRUE(absl::StrContains(gone.status().message(), "cannot read")) << gone.status();
  Write(path, Fleet(9).dump());
  EXPECT_FALSE(*file.Changed());
}

TEST_F(ConfigFileTest, FifoIsRefused) {
  const std::string fifo = Path("fleet.json");
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  ConfigFile file(fifo);
  const std::string message = WithoutHanging(fifo, [&] {
    auto changed = file.Changed();
    return changed.ok() ? std::string("read") : std::string(changed.status().message());
  });
  EXPECT_EQ(message, "config " + fifo + ": cannot read: not a regular file (a FIFO)");
}

TEST(Sha256HexTest, KnownDigest) {
  EXPECT_EQ(Sha256Hex(""), "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  EXPECT_EQ(Sha256Hex("abc"), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
}

}  // namespace
}  // namespace narwhal::server
