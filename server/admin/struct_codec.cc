#include "server/admin/struct_codec.h"

#include <string>

namespace narwhal::server {

void JsonToStruct(const nlohmann::json& object, google::protobuf::Struct* out) {
  out->clear_fields();
  if (!object.is_object()) return;
  auto& fields = *out->mutable_fields();
  for (const auto& [key, value] : object.items()) JsonToValue(value, &fields[key]);
}

void JsonToValue(const nlohmann::json& j, google::protobuf::Value* out) {
  switch (j.type()) {
    case nlohmann::json::value_t::boolean:
      out->set_bool_value(j.get<bool>());
      break;
    case nlohmann::json::value_t::number_integer:
    case nlohmann::json::value_t::number_unsigned:
    case nlohmann::json::value_t::number_float:
      out->set_number_value(j.get<double>());
      break;
    case nlohmann::json::value_t::string:
      out->set_string_value(j.get<std::string>());
      break;
    case nlohmann::json::value_t::array: {
      google::protobuf::ListValue* list = out->mutable_list_value();
      for (const nlohmann::json& item : j) JsonToValue(item, list->add_values());
      break;
    }
    case nlohmann::json::value_t::object:
      JsonToStruct(j, out->mutable_struct_value());
      break;
    default:  // null, binary, discarded
      out->set_null_value(google::protobuf::NULL_VALUE);
      break;
  }
}

}  // namespace narwhal::server
