// The build's identity: the CMake project version and the git commit the
// build was configured from ("unknown" outside a git checkout). Used by every
// binary's --version and by the narwhal_build_info metric.
#ifndef NARWHAL_VERSION_BUILD_INFO_H_
#define NARWHAL_VERSION_BUILD_INFO_H_

#include <string>

namespace narwhal {

const char* BuildVersion();
const char* BuildCommit();
// "<program> <version> (commit <commit>)", the --version line.
std::string VersionLine(const std::string& program);

}  // namespace narwhal

#endif  // NARWHAL_VERSION_BUILD_INFO_H_
