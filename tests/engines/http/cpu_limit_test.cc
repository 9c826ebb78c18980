// The container CPU limit behind serving.io_threads 0 (engines/http/cpu_limit).
#include "engines/http/cpu_limit.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>

namespace narwhal::engines {
namespace {

namespace fs = std::filesystem;

TEST(CpuLimitTest, CpuMaxQuotaOverPeriodRoundedUp) {
  EXPECT_EQ(CpuLimitFromCpuMax("max 100000"), std::nullopt);
  EXPECT_EQ(CpuLimitFromCpuMax("max 100000\n"), std::nullopt);
  EXPECT_EQ(CpuLimitFromCpuMax("150000 100000"), 2);
  EXPECT_EQ(CpuLimitFromCpuMax("50000 100000"), 1);
  EXPECT_EQ(CpuLimitFromCpuMax("200000 100000\n"), 2);
  EXPECT_EQ(CpuLimitFromCpuMax("1000 100000"), 1);  // a hundredth of a CPU: at least 1
  EXPECT_EQ(CpuLimitFromCpuMax("400000 50000"), 8);
}

TEST(CpuLimitTest, MalformedCpuMaxIsNoLimit) {
  for (const char* text : {"", "\n", "100000", "abc 100000", "150000 0", "0 100000",
                           "-5 100000", "150000 100000 7", "1.5 1", "150000 100000x"}) {
    EXPECT_EQ(CpuLimitFromCpuMax(text), std::nullopt) << text;
  }
}

TEST(CpuLimitTest, CgroupV1QuotaAndPeriod) {
  EXPECT_EQ(CpuLimitFromCfs("-1\n", "100000\n"), std::nullopt);
  EXPECT_EQ(CpuLimitFromCfs("150000\n", "100000\n"), 2);
  EXPECT_EQ(CpuLimitFromCfs("50000", "100000"), 1);
  EXPECT_EQ(CpuLimitFromCfs("300000", "100000"), 3);
  EXPECT_EQ(CpuLimitFromCfs("", "100000"), std::nullopt);
  EXPECT_EQ(CpuLimitFromCfs("150000", "0"), std::nullopt);
}

TEST(CpuLimitTest, ThreadsPerCoreFollowsTheLimitWithinTheCores) {
  EXPECT_EQ(ThreadsPerCore(64, 2), 2);
  EXPECT_EQ(ThreadsPerCore(64, std::nullopt), 64);
  EXPECT_EQ(ThreadsPerCore(4, 16), 4);  // a limit above the cores: the cores
  EXPECT_EQ(ThreadsPerCore(0, std::nullopt), 1);
  EXPECT_EQ(ThreadsPerCore(0, 3), 1);
}

class CgroupTreeTest : public testing::Test {
 protected:
  void SetUp() override {
    root_ = fs::temp_directory_path() / ("cpu_limit_test." + std::to_string(::getpid()) + "." +
                                         testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(root_);
    fs::create_directories(root_);
  }
  void TearDown() override { fs::remove_all(root_); }

  void Write(const std::string& relative, const std::string& text) {
    const fs::path path = root_ / relative;
    fs::create_directories(path.parent_path());
    std::ofstream(path) << text;
  }
  std::optional<int> Limit(const std::string& proc_self_cgroup) {
    return ContainerCpuLimit(root_.string(), proc_self_cgroup);
  }

  fs::path root_;
};

TEST_F(CgroupTreeTest, V2NamespacedContainerReadsItsOwnCpuMax) {
  Write("cgroup.controllers", "cpuset cpu io memory pids\n");
  Write("cpu.max", "150000 100000\n");
  EXPECT_EQ(Limit("0::/\n"), 2);
}

TEST_F(CgroupTreeTest, V2TakesTheTightestLimitOfTheCgroupAndItsParents) {
  Write("cgroup.controllers", "cpu\n");
  Write("kubepods/pod1/cpu.max", "400000 100000\n");
  Write("kubepods/pod1/ctr/cpu.max", "250000 100000\n");
  Write("kubepods/cpu.max", "max 100000\n");
  EXPECT_EQ(Limit("0::/kubepods/pod1/ctr\n"), 3);
  Write("kubepods/pod1/cpu.max", "100000 100000\n");
  EXPECT_EQ(Limit("0::/kubepods/pod1/ctr\n"), 1);
}

TEST_F(CgroupTreeTest, V2WithoutQuotaIsNoLimitEvenWithV1Files) {
  Write("cgroup.controllers", "cpu\n");
  Write("cpu.max", "max 100000\n");
  Write("cpu/cpu.cfs_quota_us", "100000\n");
  Write("cpu/cpu.cfs_period_us", "100000\n");
  EXPECT_EQ(Limit("0::/\n"), std::nullopt);
}

TEST_F(CgroupTreeTest, V1QuotaIsTheFallback) {
  Write("cpu,cpuacct/cpu.cfs_quota_us", "150000\n");
  Write("cpu,cpuacct/cpu.cfs_period_us", "100000\n");
  EXPECT_EQ(Limit("2:cpu,cpuacct:/docker/abc\n0::/\n"), 2);
  Write("cpu/cpu.cfs_quota_us", "-1\n");
  Write("cpu/cpu.cfs_period_us", "100000\n");
  EXPECT_EQ(Limit("2:cpu,cpuacct:/docker/abc\n0::/\n"), std::nullopt);
}

TEST_F(CgroupTreeTest, NoCgroupFilesIsNoLimit) { EXPECT_EQ(Limit(""), std::nullopt); }

}  // namespace
}  // namespace narwhal::engines
