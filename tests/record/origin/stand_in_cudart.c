/* Built as libcudart.so.13: code of "the shared CUDA runtime" for the origin rules. */
void cudart_code(void) {}
