/* An object that holds a code image (like a library's embedded fatbinary) and has code
   that calls a load function. */
const unsigned char image_bytes[64] = {0x50, 0xed, 0x55, 0xba};
void holder_code(void) {}
