"""The .actr raw counter dump: layout, writer, reader."""
