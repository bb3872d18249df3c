"""Native ops that ship prebuilt with accel, and their op builders."""
