"""What the reference scripts that write GGUF files share: writing out a gguf-py ``GGUFWriter`` whole."""

import gguf


def finish(writer: gguf.GGUFWriter) -> None:
    """Write the header, the metadata and the tensors added to ``writer``, then close its file."""
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
