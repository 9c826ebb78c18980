// The fleet config's `tls` section: both files or neither, each readable,
// PEM, and the key the certificate's — every problem reported with its key
// path, before anything could be bound (server/config/config_loader,
// server/tls_files). Certificates are made at test time.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <openssl/bio.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <future>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>

#include "server/config/config_loader.h"
#include "server/tls_files.h"
#include "tests/server/tls_test_cert.h"

namespace narwhal::server {
namespace {

namespace nt = narwhal::testing;
using json = nlohmann::json;

class ConfigLoaderTlsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto dir = nt::MakeTempDir("config_tls_");
    ASSERT_TRUE(dir.ok()) << dir.status();
    dir_ = *dir;
    auto cert = nt::MakeSelfSignedCertificate(dir_);
    ASSERT_TRUE(cert.ok()) << cert.status();
    cert_ = *cert;
  }
  void TearDown() override {
    std::error_code ignored;
    std::filesystem::remove_all(dir_, ignored);
  }

  static json Config(const json& tls) {
    json config = {{"model", "m"}, {"engines", {{{"iid", "e0"}, {"url", "http://127.0.0.1:1"}}}}};
    if (!tls.is_null()) config["tls"] = tls;
    return config;
  }

  // The error message of a config that must be refused.
  static std::string Refusal(const json& tls) {
    auto settings = ParseFleetConfig(Config(tls).dump());
    EXPECT_FALSE(settings.ok());
    if (settings.ok()) return "";
    EXPECT_EQ(settings.status().code(), absl::StatusCode::kInvalidArgument);
    return std::string(settings.status().message());
  }

  std::string Path(const std::string& name) const { return dir_ + "/" + name; }

  std::string dir_;
  nt::TestCertificate cert_;
};

TEST_F(ConfigLoaderTlsTest, AbsentOrEmptySectionIsPlaintext) {
  for (const json& tls : {json(), json::object()}) {
    auto settings = ParseFleetConfig(Config(tls).dump());
    ASSERT_TRUE(settings.ok()) << settings.status();
    EXPECT_FALSE(settings->tls.enabled());
    EXPECT_EQ(SettingsToJson(*settings)["tls"], json::object());
  }
}

TEST_F(ConfigLoaderTlsTest, GoodPairIsKeptAndPrintedBack) {
  const json tls = {{"cert_file", cert_.cert_file}, {"key_file", cert_.key_file}};
  auto settings = ParseFleetConfig(Config(tls).dump());
  ASSERT_TRUE(settings.ok()) << settings.status();
  EXPECT_TRUE(settings->tls.enabled());
  EXPECT_EQ(settings->tls.cert_file, cert_.cert_file);
  EXPECT_EQ(settings->tls.key_file, cert_.key_file);
  const json effective = SettingsToJson(*settings);
  EXPECT_EQ(effective["tls"], json({{"cert_file", cert_.cert_file}, {"key_file", cert_.key_file}}));
  auto again = ParseFleetConfig(effective.dump());
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_EQ(again->tls.cert_file, cert_.cert_file);
}

TEST_F(ConfigLoaderTlsTest, OneFileWithoutTheOtherIsRefused) {
  EXPECT_EQ(Refusal({{"cert_file", cert_.cert_file}}),
            "config: tls.key_file is required with tls.cert_file (both or neither)");
  EXPECT_EQ(Refusal({{"key_file", cert_.key_file}}),
            "config: tls.cert_file is required with tls.key_file (both or neither)");
}

TEST_F(ConfigLoaderTlsTest, EmptyPathsAndWrongTypesAreRefused) {
  EXPECT_EQ(Refusal({{"cert_file", ""}, {"key_file", cert_.key_file}}),
            "config: tls.cert_file must not be empty");
  EXPECT_EQ(Refusal({{"cert_file", 1}, {"key_file", cert_.key_file}}),
            "config: tls.cert_file must be a string (got integer)");
  EXPECT_EQ(Refusal({{"cert", cert_.cert_file}}), "config: tls.cert: unknown key");
}

TEST_F(ConfigLoaderTlsTest, MissingFilesAreNamedWithTheirKeys) {
  const std::string key = Path("missing.key");
  EXPECT_EQ(Refusal({{"cert_file", cert_.cert_file}, {"key_file", key}}),
            "config: tls.key_file \"" + key + "\": cannot read: No such file or directory");
  // Both at once; a directory is not a file.
  EXPECT_EQ(Refusal({{"cert_file", dir_}, {"key_file", key}}),
            "config: tls.cert_file \"" + dir_ +
                "\": cannot read: not a regular file (a directory); " + "tls.key_file \"" + key +
                "\": cannot read: No such file or directory");
}

// A FIFO would block the read until a writer came (start-up hung forever):
// anything but a regular file is refused before it is opened, and a file is
// read only up to 1 MiB. A symlink to a regular file (a Kubernetes Secret
// mount) is read through.
TEST_F(ConfigLoaderTlsTest, OnlyBoundedRegularFilesAreRead) {
  const std::string fifo = Path("cert.fifo");
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  auto refused = std::async(std::launch::async, [&] {
    return Refusal({{"cert_file", fifo}, {"key_file", cert_.key_file}});
  });
  if (refused.wait_for(std::chrono::seconds(10)) != std::future_status::ready) {
    // Unblock the stuck open so that the test can end, then fail.
    const int writer = ::open(fifo.c_str(), O_WRONLY | O_NONBLOCK);
    if (writer >= 0) ::close(writer);
    FAIL() << "reading a FIFO as tls.cert_file blocked";
  }
  EXPECT_EQ(refused.get(),
            "config: tls.cert_file \"" + fifo + "\": cannot read: not a regular file (a FIFO)");

  const std::string big = Path("big.pem");
  ASSERT_TRUE(nt::WriteTextFile(big, cert_.cert_pem + std::string((1 << 20) + 1, '\n')));
  EXPECT_EQ(Refusal({{"cert_file", big}, {"key_file", cert_.key_file}}),
            "config: tls.cert_file \"" + big + "\": cannot read: larger than 1048576 bytes");

  const std::string link = Path("linked.crt");
  ASSERT_EQ(::symlink(cert_.cert_file.c_str(), link.c_str()), 0);
  auto settings =
      ParseFleetConfig(Config({{"cert_file", link}, {"key_file", cert_.key_file}}).dump());
  ASSERT_TRUE(settings.ok()) << settings.status();
  EXPECT_EQ(settings->tls.cert_file, link);
}

TEST_F(ConfigLoaderTlsTest, FilesThatAreNotPemAreRefused) {
  const std::string junk = Path("junk.pem");
  ASSERT_TRUE(nt::WriteTextFile(junk, "not a certificate\n"));
  EXPECT_EQ(Refusal({{"cert_file", junk}, {"key_file", cert_.key_file}}),
            "config: tls.cert_file \"" + junk + "\" holds no PEM certificate");
  EXPECT_EQ(Refusal({{"cert_file", cert_.cert_file}, {"key_file", junk}}),
            "config: tls.key_file \"" + junk + "\" holds no PEM private key");
  // PEM armour around bytes that are no certificate.
  const std::string broken = Path("broken.crt");
  ASSERT_TRUE(nt::WriteTextFile(
      broken, "-----BEGIN CERTIFICATE-----\nAAAABBBBCCCC\n-----END CERTIFICATE-----\n"));
  const std::string message = Refusal({{"cert_file", broken}, {"key_file", cert_.key_file}});
  EXPECT_EQ(message.rfind("config: tls.cert_file \"" + broken +
                              "\" is not a PEM certificate "
                              "chain: ",
                          0),
            0u)
      << message;
  // A certificate, then something that does not parse.
  const std::string tail = Path("tail.crt");
  ASSERT_TRUE(nt::WriteTextFile(tail, cert_.cert_pem + "-----BEGIN CERTIFICATE-----\nAAAA\n"
                                                       "-----END CERTIFICATE-----\n"));
  const std::string tail_message = Refusal({{"cert_file", tail}, {"key_file", cert_.key_file}});
  EXPECT_EQ(tail_message.rfind("config: tls.cert_file \"" + tail +
                                   "\": certificate 2 does not "
                                   "parse: ",
                               0),
            0u)
      << tail_message;
  // File contents are never echoed.
  EXPECT_EQ(message.find("AAAABBBB"), std::string::npos);
}

TEST_F(ConfigLoaderTlsTest, KeyOfAnotherCertificateIsRefused) {
  auto other = nt::MakeSelfSignedCertificate(dir_, "other");
  ASSERT_TRUE(other.ok()) << other.status();
  EXPECT_EQ(Refusal({{"cert_file", cert_.cert_file}, {"key_file", other->key_file}}),
            "config: tls.key_file \"" + other->key_file +
                "\" does not match the certificate in tls.cert_file \"" + cert_.cert_file + "\"");
}

TEST_F(ConfigLoaderTlsTest, EncryptedKeyIsRefusedWithoutAPrompt) {
  struct Free {
    void operator()(BIO* b) const { BIO_free(b); }
    void operator()(EVP_PKEY* k) const { EVP_PKEY_free(k); }
  };
  std::unique_ptr<BIO, Free> in(
      BIO_new_mem_buf(cert_.key_pem.data(), static_cast<int>(cert_.key_pem.size())));
  std::unique_ptr<EVP_PKEY, Free> key(PEM_read_bio_PrivateKey(in.get(), nullptr, nullptr, nullptr));
  ASSERT_TRUE(key);
  std::unique_ptr<BIO, Free> out(BIO_new(BIO_s_mem()));
  char passphrase[] = "secret";
  ASSERT_EQ(PEM_write_bio_PKCS8PrivateKey(out.get(), key.get(), EVP_aes_128_cbc(), passphrase,
                                          sizeof passphrase - 1, nullptr, nullptr),
            1);
  char* data = nullptr;
  const long size = BIO_get_mem_data(out.get(), &data);
  const std::string encrypted = Path("encrypted.key");
  ASSERT_TRUE(nt::WriteTextFile(encrypted, std::string(data, static_cast<size_t>(size))));
  EXPECT_EQ(Refusal({{"cert_file", cert_.cert_file}, {"key_file", encrypted}}),
            "config: tls.key_file \"" + encrypted +
                "\" is encrypted (a passphrase-protected key is not supported)");
}

TEST_F(ConfigLoaderTlsTest, LoadTlsFilesReturnsThePemText) {
  auto pem = LoadTlsFiles(cert_.cert_file, cert_.key_file);
  ASSERT_TRUE(pem.ok()) << pem.status();
  EXPECT_EQ(pem->cert_chain, cert_.cert_pem);
  EXPECT_EQ(pem->private_key, cert_.key_pem);
}

}  // namespace
}  // namespace narwhal::server
