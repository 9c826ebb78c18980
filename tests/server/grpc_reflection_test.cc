// grpc.reflection.v1 answers from the generated descriptor pool.
#include "server/grpc/grpc_reflection.h"

#include <google/protobuf/descriptor.pb.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <set>
#include <string>
#include <vector>

#include "narwhal/config/v1/config.pb.h"
#include "narwhal/v1/inference.pb.h"

namespace narwhal::server {
namespace {

namespace v1 = grpc::reflection::v1;

std::vector<std::string> FileNames(const v1::ServerReflectionResponse& r) {
  std::vector<std::string> names;
  for (const std::string& bytes : r.file_descriptor_response().file_descriptor_proto()) {
    google::protobuf::FileDescriptorProto proto;
    EXPECT_TRUE(proto.ParseFromString(bytes));
    names.push_back(proto.name());
  }
  return names;
}

bool Contains(const std::vector<std::string>& v, const std::string& s) {
  return std::find(v.begin(), v.end(), s) != v.end();
}

class ReflectionV1Test : public ::testing::Test {
 protected:
  ReflectionV1Test() : service_({"narwhal.v1.Inference"}) {
    // Link and register the generated files the answers come from.
    (void)narwhal::v1::GenerateRequest::descriptor();
    (void)narwhal::config::v1::FleetConfig::descriptor();
  }
  ReflectionV1Service service_;
};

TEST_F(ReflectionV1Test, ListsTheListenersServicesAndTheStandardOnes) {
  v1::ServerReflectionRequest q;
  q.set_host("h");
  q.set_list_services("");
  const v1::ServerReflectionResponse r = service_.Answer(q);
  EXPECT_EQ(r.valid_host(), "h");
  EXPECT_EQ(r.original_request().list_services(), "");
  std::vector<std::string> names;
  for (const v1::ServiceResponse& s : r.list_services_response().service()) {
    names.push_back(s.name());
  }
  EXPECT_EQ(names, (std::vector<std::string>{"narwhal.v1.Inference", "grpc.health.v1.Health",
                                             "grpc.reflection.v1.ServerReflection",
                                             "grpc.reflection.v1alpha.ServerReflection"}));
}

TEST_F(ReflectionV1Test, SymbolAnswersItsFileWithEveryDependencyOnce) {
  for (const char* symbol :
       {"narwhal.v1.Inference", "narwhal.v1.Inference.Generate", "narwhal.v1.GenerateRequest"}) {
    v1::ServerReflectionRequest q;
    q.set_file_containing_symbol(symbol);
    const std::vector<std::string> files = FileNames(service_.Answer(q));
    EXPECT_TRUE(Contains(files, "narwhal/v1/inference.proto")) << symbol;
    EXPECT_TRUE(Contains(files, "google/protobuf/struct.proto")) << symbol;  // imported
    EXPECT_EQ(files.back(), "narwhal/v1/inference.proto");                   // dependencies first
    std::set<std::string> unique(files.begin(), files.end());
    EXPECT_EQ(unique.size(), files.size()) << symbol;
  }
}

TEST_F(ReflectionV1Test, FileByName) {
  v1::ServerReflectionRequest q;
  q.set_file_by_filename("narwhal/config/v1/config.proto");
  const std::vector<std::string> files = FileNames(service_.Answer(q));
  EXPECT_TRUE(Contains(files, "narwhal/config/v1/config.proto"));
  EXPECT_TRUE(Contains(files, "google/protobuf/descriptor.proto"));
}

TEST_F(ReflectionV1Test, ExtensionsOfAType) {
  v1::ServerReflectionRequest q;
  q.set_all_extension_numbers_of_type("google.protobuf.FieldOptions");
  const v1::ServerReflectionResponse r = service_.Answer(q);
  EXPECT_EQ(r.all_extension_numbers_response().base_type_name(), "google.protobuf.FieldOptions");
  const auto& numbers = r.all_extension_numbers_response().extension_number();
  EXPECT_NE(std::find(numbers.begin(), numbers.end(), 50300), numbers.end());  // (doc)

  v1::ServerReflectionRequest ext;
  ext.mutable_file_containing_extension()->set_containing_type("google.protobuf.FieldOptions");
  ext.mutable_file_containing_extension()->set_extension_number(50300);
  EXPECT_TRUE(Contains(FileNames(service_.Answer(ext)), "narwhal/config/v1/config.proto"));
}

TEST_F(ReflectionV1Test, WhatThePoolLacksIsNotFoundAndAnEmptyRequestInvalid) {
  v1::ServerReflectionRequest q;
  q.set_file_containing_symbol("no.such.Symbol");
  v1::ServerReflectionResponse r = service_.Answer(q);
  EXPECT_EQ(r.error_response().error_code(), static_cast<int>(grpc::StatusCode::NOT_FOUND));
  EXPECT_EQ(r.error_response().error_message(), "symbol no.such.Symbol not found");
  EXPECT_EQ(r.file_descriptor_response().file_descriptor_proto_size(), 0);

  q.Clear();
  q.set_file_by_filename("nope.proto");
  EXPECT_EQ(service_.Answer(q).error_response().error_code(),
            static_cast<int>(grpc::StatusCode::NOT_FOUND));

  q.Clear();
  q.mutable_file_containing_extension()->set_containing_type("google.protobuf.FieldOptions");
  q.mutable_file_containing_extension()->set_extension_number(1);
  EXPECT_EQ(service_.Answer(q).error_response().error_code(),
            static_cast<int>(grpc::StatusCode::NOT_FOUND));

  q.Clear();
  q.set_all_extension_numbers_of_type("no.Such");
  EXPECT_EQ(service_.Answer(q).error_response().error_code(),
            static_cast<int>(grpc::StatusCode::NOT_FOUND));

  q.Clear();
  EXPECT_EQ(service_.Answer(q).error_response().error_code(),
            static_cast<int>(grpc::StatusCode::INVALID_ARGUMENT));
}

TEST_F(ReflectionV1Test, AHugeHostileNameIsCutInTheErrorMessage) {
  v1::ServerReflectionRequest q;
  q.set_file_containing_symbol(std::string(1 << 20, '\n') + "x");
  const v1::ServerReflectionResponse r = service_.Answer(q);
  EXPECT_EQ(r.error_response().error_code(), static_cast<int>(grpc::StatusCode::NOT_FOUND));
  EXPECT_LT(r.error_response().error_message().size(), 200u);
  EXPECT_EQ(r.error_response().error_message().find('\n'), std::string::npos);
  EXPECT_EQ(r.error_response().error_message().rfind("symbol ???", 0), 0u);
}

}  // namespace
}  // namespace narwhal::server
