// JSON (nlohmann) to google.protobuf.Struct / Value, for the admin API's
// free-form fields (Event.fields, GetConfig). Numbers become doubles; null,
// binary and discarded values become NULL_VALUE.
#ifndef NARWHAL_SERVER_ADMIN_STRUCT_CODEC_H_
#define NARWHAL_SERVER_ADMIN_STRUCT_CODEC_H_

#include <google/protobuf/struct.pb.h>

#include <nlohmann/json.hpp>

namespace narwhal::server {

// `object`'s members into `out` (cleared first); a non-object leaves it empty.
void JsonToStruct(const nlohmann::json& object, google::protobuf::Struct* out);
void JsonToValue(const nlohmann::json& j, google::protobuf::Value* out);

}  // namespace narwhal::server

#endif  // NARWHAL_SERVER_ADMIN_STRUCT_CODEC_H_
