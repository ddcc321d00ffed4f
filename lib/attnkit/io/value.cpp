#include "attnkit/io/value.hpp"

#include "attnkit/tensor/error.hpp"

namespace attnkit::io {

const Value* Value::find(std::string_view name) const {
  for (const auto& [key, value] : members_)
    if (key == name) return &value;
  return nullptr;
}

std::vector<std::string> Value::names() const {
  std::vector<std::string> out;
  for (const auto& m : members_) out.push_back(m.first);
  return out;
}

Value& Value::set(std::string name, Value value) {
  for (auto& m : members_)
    if (m.first == name) {
      m.second = std::move(value);
      return *this;
    }
  members_.emplace_back(std::move(name), std::move(value));
  return *this;
}

Value& Value::append(std::string name, Value value) {
  members_.emplace_back(std::move(name), std::move(value));
  return *this;
}

void Value::set_path(const std::vector<std::string>& names, Value value) {
  AK_CHECK(!names.empty(), "bundle: empty member name");
  Value* node = this;
  for (size_t i = 0; i + 1 < names.size(); ++i) {
    AK_CHECK(node->is_bundle(), "bundle: \"{}\" is a tensor, it cannot hold \"{}\"", names[i - (i > 0)], names[i]);
    if (!node->find(names[i])) node->set(names[i], Value::bundle());
    node = const_cast<Value*>(node->find(names[i]));
  }
  AK_CHECK(node->is_bundle(), "bundle: \"{}\" is a tensor, it cannot hold \"{}\"", names.size() > 1 ? names[names.size() - 2] : "", names.back());
  AK_CHECK(node->find(names.back()) == nullptr, "bundle: the name \"{}\" is given twice", fmt::join(names, "/"));
  node->set(names.back(), std::move(value));
}

}  // namespace attnkit::io
