// A worker for launch_test's restart case: joins the group through init_from_env(); in the
// first attempt rank 1 then dies, so the launcher restarts the group; in the second every
// rank allreduces its rank + 1 and prints the sum. The second attempt can only form its
// group if it does not read the first attempt's rendezvous keys (TINYDDP_STORE_PREFIX).
#include <cstdlib>
#include <iostream>

#include "tinyddp/comm/comm.h"
#include "tinyddp/tensor/all.h"

int main() {
  using namespace tinyddp;
  try {
    auto pg = comm::init_from_env();
    pg->barrier()->wait();
    const char* attempt = std::getenv("TINYDDP_RESTART_COUNT");
    if (attempt != nullptr && std::string(attempt) == "0" && pg->rank() == 1) return 1;
    const tensor::Tensor t = tensor::full({1}, pg->rank() + 1.0);
    pg->allreduce(t)->wait();
    std::cout << "attempt " << attempt << " sum " << t.item<double>() << std::endl;
    pg->barrier()->wait();
    comm::destroy_process_group();
    return 0;
  } catch (const std::exception& e) {
    std::cerr << "restart_worker: " << e.what() << std::endl;
    return 1;
  }
}
