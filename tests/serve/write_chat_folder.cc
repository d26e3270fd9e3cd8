// write_chat_folder DIR: a small chat model's folder (tests/chat_folder.h)
// for the server's tests, written into the new or empty folder DIR.
#include <cstdio>
#include <filesystem>

#include "tests/chat_folder.h"

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: write_chat_folder DIR\n");
    return 2;
  }
  std::error_code error;
  std::filesystem::create_directories(argv[1], error);
  const attn::Status status = attn::test::WriteChatFolder(argv[1]);
  if (!status.ok()) {
    std::fprintf(stderr, "write_chat_folder: %s\n", status.message().c_str());
    return 1;
  }
  return 0;
}
