#include "server/grpc/grpc_reflection.h"

#include <google/protobuf/descriptor.h>
#include <google/protobuf/descriptor.pb.h>

#include <set>
#include <utility>

namespace narwhal::server {
namespace {

namespace v1 = grpc::reflection::v1;
using google::protobuf::Descriptor;
using google::protobuf::DescriptorPool;
using google::protobuf::FieldDescriptor;
using google::protobuf::FileDescriptor;

// A client's name in an error message: printable ASCII, at most 128 bytes.
std::string Shown(const std::string& name) {
  constexpr size_t kMaxShown = 128;
  std::string out;
  for (const char c : name) {
    if (out.size() >= kMaxShown) return out + "...";
    out += c >= 0x20 && c < 0x7f ? c : '?';
  }
  return out;
}

void SetError(grpc::StatusCode code, std::string message, v1::ServerReflectionResponse* out) {
  v1::ErrorResponse* error = out->mutable_error_response();
  error->set_error_code(static_cast<int>(code));
  error->set_error_message(std::move(message));
}

// `file` and its dependencies, transitively, each once (dependencies first).
void AddFile(const FileDescriptor* file, std::set<std::string>* sent,
             v1::FileDescriptorResponse* out) {
  if (!sent->insert(file->name()).second) return;
  for (int i = 0; i < file->dependency_count(); ++i) AddFile(file->dependency(i), sent, out);
  google::protobuf::FileDescriptorProto proto;
  file->CopyTo(&proto);
  proto.SerializeToString(out->add_file_descriptor_proto());
}

void SetFile(const FileDescriptor* file, const std::string& what,
             v1::ServerReflectionResponse* out) {
  if (file == nullptr) {
    SetError(grpc::StatusCode::NOT_FOUND, what + " not found", out);
    return;
  }
  std::set<std::string> sent;
  AddFile(file, &sent, out->mutable_file_descriptor_response());
}

class Reactor final
    : public grpc::ServerBidiReactor<v1::ServerReflectionRequest, v1::ServerReflectionResponse> {
 public:
  explicit Reactor(const ReflectionV1Service& service) : service_(service) { StartRead(&request_); }

  void OnReadDone(bool ok) override {
    if (!ok) {  // the client closed its side (or the call ended)
      Finish(grpc::Status::OK);
      return;
    }
    response_ = service_.Answer(request_);
    StartWrite(&response_);
  }

  void OnWriteDone(bool ok) override {
    if (!ok) {
      Finish(grpc::Status(grpc::StatusCode::CANCELLED, "the reflection client went away"));
      return;
    }
    StartRead(&request_);
  }

  void OnDone() override { delete this; }

 private:
  const ReflectionV1Service& service_;
  v1::ServerReflectionRequest request_;
  v1::ServerReflectionResponse response_;
};

}  // namespace

ReflectionV1Service::ReflectionV1Service(std::vector<std::string> services)
    : services_(WithStandardServices(std::move(services))) {}

std::vector<std::string> ReflectionV1Service::WithStandardServices(
    std::vector<std::string> services) {
  for (const char* name : {"grpc.health.v1.Health", "grpc.reflection.v1.ServerReflection",
                           "grpc.reflection.v1alpha.ServerReflection"}) {
    bool present = false;
    for (const std::string& s : services) present = present || s == name;
    if (!present) services.emplace_back(name);
  }
  return services;
}

grpc::ServerBidiReactor<v1::ServerReflectionRequest, v1::ServerReflectionResponse>*
ReflectionV1Service::ServerReflectionInfo(grpc::CallbackServerContext* /*context*/) {
  return new Reactor(*this);
}

v1::ServerReflectionResponse ReflectionV1Service::Answer(
    const v1::ServerReflectionRequest& request) const {
  const DescriptorPool* pool = DescriptorPool::generated_pool();
  v1::ServerReflectionResponse out;
  out.set_valid_host(request.host());
  *out.mutable_original_request() = request;
  switch (request.message_request_case()) {
    case v1::ServerReflectionRequest::kListServices:
      for (const std::string& name : services_) {
        out.mutable_list_services_response()->add_service()->set_name(name);
      }
      break;
    case v1::ServerReflectionRequest::kFileByFilename:
      SetFile(pool->FindFileByName(request.file_by_filename()),
              "file " + Shown(request.file_by_filename()), &out);
      break;
    case v1::ServerReflectionRequest::kFileContainingSymbol:
      SetFile(pool->FindFileContainingSymbol(request.file_containing_symbol()),
              "symbol " + Shown(request.file_containing_symbol()), &out);
      break;
    case v1::ServerReflectionRequest::kFileContainingExtension: {
      const v1::ExtensionRequest& ext = request.file_containing_extension();
      const Descriptor* type = pool->FindMessageTypeByName(ext.containing_type());
      if (type == nullptr) {
        SetError(grpc::StatusCode::NOT_FOUND, "type " + Shown(ext.containing_type()) + " not found",
                 &out);
        break;
      }
      const FieldDescriptor* field = pool->FindExtensionByNumber(type, ext.extension_number());
      SetFile(field == nullptr ? nullptr : field->file(),
              "extension " + std::to_string(ext.extension_number()) + " of " +
                  Shown(ext.containing_type()),
              &out);
      break;
    }
    case v1::ServerReflectionRequest::kAllExtensionNumbersOfType: {
      const Descriptor* type = pool->FindMessageTypeByName(request.all_extension_numbers_of_type());
      if (type == nullptr) {
        SetError(grpc::StatusCode::NOT_FOUND,
                 "type " + Shown(request.all_extension_numbers_of_type()) + " not found", &out);
        break;
      }
      std::vector<const FieldDescriptor*> extensions;
      pool->FindAllExtensions(type, &extensions);
      v1::ExtensionNumberResponse* numbers = out.mutable_all_extension_numbers_response();
      numbers->set_base_type_name(type->full_name());
      for (const FieldDescriptor* e : extensions) numbers->add_extension_number(e->number());
      break;
    }
    case v1::ServerReflectionRequest::MESSAGE_REQUEST_NOT_SET:
      SetError(grpc::StatusCode::INVALID_ARGUMENT, "the request names nothing to reflect on", &out);
      break;
  }
  return out;
}

namespace {

class ReflectionCall final : public H2CallHandler {
 public:
  ReflectionCall(const ReflectionV1Service& service, std::weak_ptr<H2Call> call)
      : service_(service), call_(std::move(call)) {}

  void OnMessage(std::string message) override {
    std::shared_ptr<H2Call> call = call_.lock();
    if (!call || call->finished()) return;
    v1::ServerReflectionRequest request;
    if (!request.ParseFromString(message)) {
      call->Finish(static_cast<int>(grpc::StatusCode::INVALID_ARGUMENT),
                   "expected a grpc.reflection ServerReflectionRequest");
      return;
    }
    constexpr size_t kMaxWaiting = 4 << 20;
    if (call->queued() > kMaxWaiting) {
      call->Finish(static_cast<int>(grpc::StatusCode::RESOURCE_EXHAUSTED),
                   "reflection answers are not being read");
      return;
    }
    call->Write(service_.Answer(request).SerializeAsString());
  }
  void OnHalfClose() override {
    if (std::shared_ptr<H2Call> call = call_.lock()) call->Finish(0, "");
  }
  void OnCancel() override {}
  bool StreamsRequests() const override { return true; }

 private:
  const ReflectionV1Service& service_;
  std::weak_ptr<H2Call> call_;
};

}  // namespace

std::unique_ptr<H2CallHandler> NewReflectionCall(const ReflectionV1Service& service,
                                                 std::weak_ptr<H2Call> call) {
  return std::make_unique<ReflectionCall>(service, std::move(call));
}

}  // namespace narwhal::server
